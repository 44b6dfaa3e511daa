#!/usr/bin/env bash
# strata against PyTorch on the same GPU, in one table (at most 3 minutes
# after scripts/test-gpu.sh built $BUILD): the MNIST MLP and CNN at batch 128
# and 1024, each eager and with the step captured as a CUDA graph, samples/s
# of one pass of 60,000 examples with the data on the GPU, Adam.
#   strata:  bench/train_bench --device gpu --strategies one_device --capture (fit(), as examples/mnist_mlp)
#   PyTorch: bench/torch_mnist.py (eager; torch.cuda.CUDAGraph over the whole step, Adam capturable)
#   bash scripts/bench-gpu.sh             # BUILD=build-gpu (scripts/test-gpu.sh's), JOBS=8
# MNIST from .data/mnist inside the repository (git ignores it; see
# scripts/test-gpu.sh for how to fill it); random data of MNIST's shape
# without it (the throughput is the same, the table says which). A column
# whose side could not run (no PyTorch, no GPU) says so; exits 1 only when a
# benchmark that could run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-gpu}
jobs=${JOBS:-8}
budget_s=180
start=$(date +%s)
export STRATA_MNIST_DIR="$PWD/.data/mnist"
[ -f "$STRATA_MNIST_DIR/train-images-idx3-ubyte" ] && data="MNIST from .data/mnist" ||
  data="random data (.data/mnist is empty: bash scripts/fetch-mnist.sh .data/mnist)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0

command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | sed 's/^/GPU: /'
if [ ! -f "$build/build.ninja" ]; then
  echo "bench-gpu.sh: $build is not configured: run scripts/test-gpu.sh first (it configures and builds it)"
  exit 1
fi
echo "=== build bench/train_bench ($jobs jobs)"
if ! ninja -C "$build" -j "$jobs" bench/train_bench > "$build.bench-build.log" 2>&1; then
  tail -n 30 "$build.bench-build.log"
  echo "bench-gpu.sh: bench/train_bench did not build (log: $build.bench-build.log; it needs OpenBLAS)"
  exit 1
fi

echo "=== strata (train_bench, 1 epoch, 1 run each)"
for batch in 128 1024; do
  "$build/bench/train_bench" --device gpu --models mlp,cnn --strategies one_device --batch "$batch" --epochs 1 \
    --runs 1 --capture > "$out/strata_$batch.txt" 2>&1
  rc=$?
  cat "$out/strata_$batch.txt"
  # no GPU here: a skip, not a failure (the table says so)
  [ "$rc" -ne 0 ] && ! grep -q "the machine no GPU" "$out/strata_$batch.txt" && status=1
done

echo "=== PyTorch (bench/torch_mnist.py)"
python3 bench/torch_mnist.py --batches 128,1024 --models mlp,cnn > "$out/torch.txt" 2>&1
rc=$?
cat "$out/torch.txt"
[ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && status=1  # 77: no PyTorch or no GPU, skipped

python3 - "$out" "$data" <<'PY'
import os, re, sys
out, data = sys.argv[1], sys.argv[2]
vals = {}
for batch in ("128", "1024"):
    path = os.path.join(out, f"strata_{batch}.txt")
    for line in open(path, encoding="utf-8", errors="replace") if os.path.exists(path) else []:
        f = line.split()
        # "   mlp       one_device         1   123456 ..."; "   mlp one_device+graph 1 123456 ... captured steps"
        if len(f) >= 4 and f[0] in ("mlp", "cnn") and f[1] in ("one_device", "one_device+graph"):
            vals[(f[0], batch, "strata", "graph" if f[1].endswith("graph") else "eager")] = float(f[3])
tp = os.path.join(out, "torch.txt")
torch_note = ""
for line in open(tp, encoding="utf-8", errors="replace") if os.path.exists(tp) else []:
    f = line.split()
    if len(f) == 4 and f[0] in ("mlp", "cnn") and f[2] in ("eager", "graph"):
        vals[(f[0], f[1], "torch", f[2])] = float(f[3])
    elif "skipped" in line:
        torch_note = line.strip()
print(f"\n# samples/s, one pass of 60,000 examples, Adam, data on the GPU ({data})")
cols = [("strata", "eager"), ("strata", "graph"), ("torch", "eager"), ("torch", "graph")]
print(f"{'model':>5} {'batch':>6} " + " ".join(f"{a + ' ' + b:>14}" for a, b in cols))
for model in ("mlp", "cnn"):
    for batch in ("128", "1024"):
        cells = [vals.get((model, batch, a, b)) for a, b in cols]
        print(f"{model:>5} {batch:>6} " + " ".join(f"{c:>14.0f}" if c else f"{'-':>14}" for c in cells))
if torch_note:
    print(f"PyTorch: {torch_note}")
if not any(k[2] == "strata" for k in vals):
    print("strata: no figures (no GPU, or train_bench failed: see above)")
PY

total=$(($(date +%s) - start))
echo "time: $total s of a $budget_s s budget$([ "$total" -gt "$budget_s" ] && echo ': OVER BUDGET')"
exit "$status"
