#!/usr/bin/env bash
# The GPU suite in one command, on any Linux machine with an NVIDIA GPU,
# nvcc, meson and ninja (no package installs, no network): configures
# build-gpu with the CUDA backend, builds, runs `meson test --suite gpu`,
# then the GPU benchmarks when they were built. Optional parts that are
# missing (OpenBLAS, MPI, NCCL) are turned off, saying so; doctest is
# required (the tests are doctest programs). Exits non-zero on any failure.
#   bash scripts/test-gpu.sh            # build-gpu, release
#   BUILD=build-gpu-dbg bash scripts/test-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-gpu}
status=0

# The GPU first: which one the numbers below come from.
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/GPU /'
else
  echo "test-gpu.sh: nvidia-smi not found; is the NVIDIA driver installed?"
fi

# nvcc: on PATH, or where the toolkit installs it.
if ! command -v nvcc > /dev/null; then
  for d in /usr/local/cuda/bin /opt/cuda/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi
for tool in nvcc meson ninja; do
  command -v "$tool" > /dev/null || { echo "test-gpu.sh: $tool not found; it is required"; exit 1; }
done
nvcc --version | tail -n 1

options=(-Dcuda=enabled -Dbuildtype=release -Dwerror=true -Dexamples=true)
if [ ! -f /usr/include/doctest/doctest.h ] && ! pkg-config --exists doctest 2> /dev/null; then
  echo "test-gpu.sh: doctest not found (/usr/include/doctest/doctest.h); the GPU tests need it"
  exit 1
fi
if pkg-config --exists openblas 2> /dev/null || [ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ]; then
  options+=(-Dblas=auto)
else
  options+=(-Dblas=disabled)
  echo "test-gpu.sh: no OpenBLAS: skipping the tests that compare with the host compute, and train_bench"
fi
if ! command -v mpicxx > /dev/null && ! pkg-config --exists ompi-cxx mpich 2> /dev/null; then
  options+=(-Dmpi=disabled)
  echo "test-gpu.sh: no MPI: the MPI backend is off (not needed for the GPU suite)"
fi

echo "=== configure $build: ${options[*]}"
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" "${options[@]}" > "$build.setup.log" 2>&1 || { cat "$build.setup.log"; exit 1; }
else
  meson setup "$build" "${options[@]}" > "$build.setup.log" 2>&1 || { cat "$build.setup.log"; exit 1; }
fi
grep -A6 "Backends" "$build.setup.log" | sed -n '2,6p'

echo "=== build"
if ! ninja -C "$build" > "$build.build.log" 2>&1; then
  tail -n 60 "$build.build.log"
  echo "test-gpu.sh: the build failed (log: $build.build.log)"
  exit 1
fi

echo "=== meson test --suite gpu"
meson test -C "$build" --suite gpu --print-errorlogs || status=1
# A skipped GPU test on a machine with a GPU means the GPU was not usable: a
# failure here. The MNIST examples (suite gpu too) skip without MNIST, saying so.
python3 - "$build/meson-logs/testlog.json" <<'PY' || status=1
import json, sys
bad = 0
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)
    if r["result"] != "SKIP":
        continue
    if "example_" in r["name"]:
        print(f"skipped: {r['name']} (no MNIST: bash scripts/fetch-mnist.sh, or copy it to ~/.cache/strata/mnist)")
    else:
        print(f"test-gpu.sh: {r['name']} was skipped although this runs on a GPU machine (no usable device?)")
        bad = 1
sys.exit(bad)
PY

echo "=== GPU benchmarks"
echo "--- allreduce_bench --device gpu (virtual GPUs on GPU 0: p = 2, 4, 8, 4 KiB to 256 MiB)"
"$build/bench/allreduce_bench" --device gpu --replicas 2,4,8 --min 4K --max 256M || status=1
bench="$build/bench/train_bench"
if [ -x "$bench" ]; then
  for batch in 128 1024; do
    echo "--- train_bench --device gpu --models mlp,cnn --batch $batch --capture (eager, then each step one CUDA graph)"
    "$bench" --device gpu --models mlp,cnn --strategies one_device --batch "$batch" --epochs 2 --runs 3 --capture ||
      status=1
  done
  echo "--- train_bench --device gpu --models mlp --strategies one_device,mirrored --replicas 1,2,4 (virtual GPUs)"
  for batch in 128 1024; do
    "$bench" --device gpu --models mlp --strategies one_device,mirrored --replicas 1,2,4 --batch "$batch" --epochs 2 \
      --runs 3 || status=1
  done
else
  echo "skipped: $bench was not built (needs OpenBLAS and -Dbench=true)"
fi

echo "--- PyTorch on the same GPU (bench/torch_mnist.py)"
python3 bench/torch_mnist.py
[ $? -eq 1 ] && status=1  # 77: no PyTorch, skipped

[ "$status" -eq 0 ] && echo "test-gpu.sh: all passed" || echo "test-gpu.sh: FAILED"
exit "$status"
