#!/usr/bin/env bash
# The GPU suite in one short run, for a GPU machine lent for minutes (one
# H100 or H200, 16 cores, g++ 13, no network): configures $BUILD with the CUDA
# backend, builds ONLY the targets below (the GPU tests and the two MNIST
# examples they run), runs `meson test --suite gpu` (every GPU test, and the
# MNIST examples with --device gpu), and prints one table: test, result,
# seconds, and for a skip its reason. Budget: 6 minutes on one H100 with 16
# cores, build included; the last line says how long it took.
#   bash scripts/test-gpu.sh                  # build-gpu, release, 8 jobs
#   BUILD=build-gpu2 JOBS=16 bash scripts/test-gpu.sh
#   WERROR=true bash scripts/test-gpu.sh      # warnings as errors, as CI builds (default off here: the GPU
#                                             # machine's g++ 13 is not CI's g++ 12, and warnings are CI's job)
# Exits 1 on any failure (a failed, timed-out or crashed test, a failed
# build); a skipped test is a skip, with its reason in the table (no GPU; a
# case that needs two GPUs on a machine with one; no MNIST), never a pass.
#
# MNIST: from .data/mnist inside the repository (git ignores it; the GPU
# machine has no network, so it travels with the working tree). Fill it here:
#   bash scripts/fetch-mnist.sh .data/mnist       # or: mkdir -p .data/mnist && cp ~/.cache/strata/mnist/* .data/mnist/
# Without it the MNIST examples are skipped (their reason says so).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-gpu}
jobs=${JOBS:-8}
werror=${WERROR:-false}
mnist=.data/mnist
budget_s=360
start=$(date +%s)

# What this script builds: the GPU suite's programs and the examples it runs
# (tests/gpu/meson.build, examples/meson.build). Targets a configuration does
# not have (no MPI: the two mpirun tests; no OpenBLAS: the tests that compare
# with the host) are left out, saying so.
targets=(
  tests/gpu/gpu_cuda_tensor_test tests/gpu/gpu_graph_test tests/gpu/gpu_device_comm_test
  tests/gpu/gpu_compute_test tests/gpu/gpu_losses_test tests/gpu/gpu_images_optim_test
  tests/gpu/gpu_mirrored_test tests/gpu/gpu_captured_steps_test
  tests/gpu/gpu_nccl_test tests/gpu/gpu_nccl_async_test
  tests/gpu/gpu_nccl_mpi_test tests/gpu/gpu_multi_worker_test
  examples/mnist_mlp examples/mnist_cnn
)

# The GPU first: which one the figures come from.
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/GPU /'
else
  echo "test-gpu.sh: nvidia-smi not found: no GPU driver here, so every GPU test reports SKIP (no GPU)"
fi
if ! command -v nvcc > /dev/null; then
  for d in /usr/local/cuda/bin /opt/cuda/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi
for tool in nvcc meson ninja python3; do
  command -v "$tool" > /dev/null || { echo "test-gpu.sh: $tool not found; it is required"; exit 1; }
done
echo "$(nvcc --version | tail -n 1); $(${CXX:-g++} --version | head -n 1)"

options=(-Dcuda=enabled -Dbuildtype=release -Dwerror="$werror" -Dtests=true -Dexamples=true -Dtest_unity=false)
if [ ! -f /usr/include/doctest/doctest.h ] && ! pkg-config --exists doctest 2> /dev/null; then
  echo "test-gpu.sh: doctest not found (/usr/include/doctest/doctest.h); the GPU tests need it"
  exit 1
fi
if pkg-config --exists openblas 2> /dev/null || [ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ]; then
  options+=(-Dblas=auto)
else
  options+=(-Dblas=disabled)
  echo "test-gpu.sh: no OpenBLAS: the GPU tests that compare with the host compute are not built"
fi
if ! command -v mpicxx > /dev/null && ! pkg-config --exists ompi-cxx mpich 2> /dev/null; then
  options+=(-Dmpi=disabled)
  echo "test-gpu.sh: no MPI: the two mpirun GPU tests are not built"
fi

if [ -d "$mnist" ] && [ -f "$mnist/train-images-idx3-ubyte" ]; then
  echo "MNIST: $mnist"
else
  echo "MNIST: $mnist is missing: the MNIST examples will report SKIP. Fill it (git ignores it):"
  echo "  bash scripts/fetch-mnist.sh $mnist   # or: mkdir -p $mnist && cp ~/.cache/strata/mnist/* $mnist/"
fi
export STRATA_MNIST_DIR="$PWD/$mnist"

echo "=== configure $build: ${options[*]}"
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" "${options[@]}" > "$build.setup.log" 2>&1 || { cat "$build.setup.log"; exit 1; }
else
  CXX=${CXX:-g++} meson setup "$build" "${options[@]}" > "$build.setup.log" 2>&1 || { cat "$build.setup.log"; exit 1; }
fi
known=$(ninja -C "$build" -t targets all 2> /dev/null | cut -d: -f1)
build_list=()
for t in "${targets[@]}"; do
  if grep -qx "$t" <<< "$known"; then build_list+=("$t"); else echo "not in this configuration: $t"; fi
done

echo "=== build (${#build_list[@]} targets, $jobs jobs)"
if ! ninja -C "$build" -j "$jobs" "${build_list[@]}" > "$build.build.log" 2>&1; then
  tail -n 60 "$build.build.log"
  echo "test-gpu.sh: the build failed (log: $build.build.log)"
  echo "time: build failed after $(($(date +%s) - start)) s"
  exit 1
fi
built=$(date +%s)
echo "built in $((built - start)) s"

echo "=== meson test --suite gpu"
# --no-rebuild: meson test would otherwise build every target of the project first
meson test -C "$build" --suite gpu --no-rebuild --print-errorlogs > "$build.test.log" 2>&1
tested=$(date +%s)

python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, re, sys
rows, failed = [], 0
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)
    name = r["name"].rsplit(" / ", 1)[-1].strip()  # "strata:gpu / gpu_nccl" -> "gpu_nccl"
    result = r["result"]
    out = r.get("stdout") or ""
    why = ""
    if result == "SKIP":
        # the test's own reasons: "SKIPPED: ..." (skip.hpp), "skipped: ..." (gpu_main), "SKIP: ..." (the examples)
        reasons = [m.strip() for m in re.findall(r"^(?:SKIPPED|skipped|SKIP):\s*(.*)$", out, re.M)]
        why = "; ".join(dict.fromkeys(reasons)) or "exit 77 (no reason printed)"
        shown = "skipped"
    elif result in ("OK", "EXPECTEDFAIL"):
        shown = "passed"
    else:
        shown = "FAILED" if result == "FAIL" else result
        failed += 1
    rows.append((name, shown, r.get("duration", 0.0), why))
w = max([len(n) for n, *_ in rows] + [4])
print(f"{'test':<{w}}  {'result':<8} {'seconds':>8}  reason")
for name, shown, secs, why in rows:
    print(f"{name:<{w}}  {shown:<8} {secs:>8.1f}  {why}")
counts = {k: sum(1 for r in rows if r[1] == k) for k in ("passed", "skipped")}
print(f"{len(rows)} tests: {counts['passed']} passed, {counts['skipped']} skipped, {failed} failed")
sys.exit(1 if failed or not rows else 0)
PY
status=$?
[ "$status" -ne 0 ] && echo "(failures: their logs are in $build.test.log)"

end=$(date +%s)
total=$((end - start))
echo "time: build $((built - start)) s, tests $((tested - built)) s, total $total s of a $budget_s s budget" \
  "(one H100, 16 cores)$([ "$total" -gt "$budget_s" ] && echo ': OVER BUDGET')"
[ "$status" -eq 0 ] && echo "test-gpu.sh: no failures" || echo "test-gpu.sh: FAILED"
exit "$status"
