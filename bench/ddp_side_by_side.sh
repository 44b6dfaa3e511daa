#!/usr/bin/env bash
# ddp_side_by_side.sh [--hosts "2 4"] [--rates "1gbit 10gbit"] [--delay-ms 0.2] [--buckets "4 25"] [--runs 3]
#                     [--steps 20] [--warmup 8] [--batch 64] [--model wide|deep|gpt] [--optimizer sgd] [--bench PATH]
#                     [--strata-algo "auto direct"]
# -- issue 25's comparison in one sitting: over bench/shaped_link.sh's shaped links, for each host
# count and rate, strata's MultiWorkerMirroredStrategy (bench/mpi_train_bench: flat, then each
# bucket size) and PyTorch DDP with gloo (bench/ddp_mlp.py: each bucket size), the configurations
# interleaved run by run (--runs rounds) so that the machine's load falls on all alike. Prints
# every run's row, then the medians and the issue's ratios:
# --strata-algo: strata's configurations once per all-reduce algorithm named (auto: AutoReduce's
# choice; ring, direct, native: forced through STRATA_MPI_ALLREDUCE, the label gets "+ALGO").
#   (a) exposed communication with buckets / without (strata; target <= 40% at 10 Gbit/s)
#   (b) strata samples/s / PyTorch DDP-gloo samples/s (target >= 1.3x)
# Not a test (CI does not run it); needs root (namespaces). Without python3-torch the DDP rows
# say "skipped: python3-torch not installed" and the rest runs. PYTHON picks the interpreter
# (default /usr/bin/python3, where Debian's python3-torch installs).
#   bench/ddp_side_by_side.sh --hosts 2 --rates "1gbit 10gbit" --runs 3
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
hosts_list="2" rates="1gbit 10gbit" delay_ms=0.2 buckets="4 25" runs=3 steps=20 warmup=12 batch=64
model=wide optimizer=sgd algos=auto bench="$here/../build-bench/bench/mpi_train_bench"
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) hosts_list=$2 ;; --rates) rates=$2 ;; --delay-ms) delay_ms=$2 ;; --buckets) buckets=$2 ;;
    --runs) runs=$2 ;; --steps) steps=$2 ;; --warmup) warmup=$2 ;; --batch) batch=$2 ;; --model) model=$2 ;;
    --optimizer) optimizer=$2 ;; --bench) bench=$2 ;; --strata-algo) algos=$2 ;;
    *) echo "ddp_side_by_side.sh: unknown option $1 (see the top of the file)" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -x $bench ]] || { echo "ddp_side_by_side.sh: no $bench: ninja -C build-bench bench/mpi_train_bench" >&2; exit 2; }
py=${PYTHON:-/usr/bin/python3}
torch=1
"$py" -c 'import torch' 2>/dev/null || torch=0

common=(--model "$model" --optimizer "$optimizer" --batch "$batch" --steps "$steps" --warmup "$warmup")
rows=$(mktemp "${TMPDIR:-/tmp}/ddp_side_by_side.XXXXXX")
trap 'rm -f "$rows"' EXIT

echo "# ddp_side_by_side.sh: $model, $optimizer, batch $batch a rank, $steps steps after $warmup, $runs round(s); $(nproc) cores"
echo "# load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
((torch)) || echo "# PyTorch DDP: skipped: python3-torch not installed"
printf '# %-6s %-7s %-3s %-18s %5s %7s %11s %9s %10s %10s %8s\n' hosts rate run config ranks bucket samples/s step_ms \
  compute_ms exposed_ms other_ms
last_link=''
for hosts in $hosts_list; do
  for rate in $rates; do
    for ((r = 1; r <= runs; r++)); do
      configs=()
      for a in $algos; do
        sfx=${a/#auto/}
        configs+=("strata-flat${sfx:++$sfx} 0")
        for b in $buckets; do configs+=("strata-b$b${sfx:++$sfx} $b"); done
      done
      if ((torch)); then for b in $buckets; do configs+=("ddp-b$b $b"); done; fi
      for c in "${configs[@]}"; do
        label=${c% *} mb=${c#* }
        algo=''
        if [[ $label == strata-* ]]; then
          cmd=("$bench" "${common[@]}" --bucket-mb "$mb" --label "$label")
          [[ $label != *+* ]] || algo=${label#*+}
        else cmd=("$py" "$here/ddp_mlp.py" "${common[@]}" --bucket-mb "$mb" --label "$label" --threads 1); fi
        out=$(STRATA_MPI_ALLREDUCE=$algo "$here/shaped_link.sh" --hosts "$hosts" --rate "$rate" --delay-ms "$delay_ms" -- "${cmd[@]}" 2>&1 || true)
        link=$(grep -m1 '^# shaped_link.sh:' <<<"$out" || true)
        [[ $link == "$last_link" ]] || { echo "$link"; last_link=$link; }
        line=$(grep -m1 "^$label " <<<"$out" || true)
        [[ -n $line ]] || line="$label (failed: rerun by hand: bench/shaped_link.sh --hosts $hosts --rate $rate -- ${cmd[*]})"
        printf '  %-6s %-7s %-3s %s\n' "$hosts" "$rate" "$r" "$line" | tee -a "$rows"
      done
    done
  done
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# medians per (hosts, rate, config) and the ratios
"$py" - "$rows" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 10 or "(failed:" in line:
        continue
    hosts, rate, cfg = f[0], f[1], f[3]
    sps, step, comp, exp = map(float, (f[6], f[7], f[8], f[9]))
    rows.setdefault((hosts, rate), {}).setdefault(cfg, []).append((sps, step, comp, exp))
print("\n# medians: hosts rate config  samples/s  step_ms  compute_ms  exposed_ms  (runs)")
for (hosts, rate), cfgs in rows.items():
    med = {c: [statistics.median(v[i] for v in vals) for i in range(4)] for c, vals in cfgs.items()}
    for c, m in med.items():
        print(f"  {hosts:>2} {rate:<7} {c:<18} {m[0]:9.0f} {m[1]:8.1f} {m[2]:10.1f} {m[3]:10.1f}  ({len(cfgs[c])})")
    for c, m in med.items():
        flat = "strata-flat" + c[c.index("+"):] if "+" in c else "strata-flat"
        if c.startswith("strata-b") and flat in med and med[flat][3] > 0:
            print(f"  (a) {hosts} hosts {rate}: exposed {c} / {flat} = {m[3] / med[flat][3]:.0%}")
    ddps = {c: m for c, m in med.items() if c.startswith("ddp-")}
    for c, m in med.items():
        if c.startswith("strata-"):
            for d, dm in ddps.items():
                print(f"  (b) {hosts} hosts {rate}: samples/s {c} / {d} = {m[0] / dm[0]:.2f}x")
EOF
