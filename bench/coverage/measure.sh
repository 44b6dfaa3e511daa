#!/usr/bin/env bash
# docs/gpu-coverage.md's figures: builds bench/coverage/gpu_step.cpp with
# --coverage -O0 (one translation unit, about 1.5 minutes), runs its one-device
# steps on the GPU stand-in and on the host's compute and its several-replica
# step (gpu_step mirrored) on the stand-in, reads the three runs with gcov's
# JSON and prints the table's rows (bench/coverage/measure.py).
#   bash bench/coverage/measure.sh [WORKDIR]     # WORKDIR: default /tmp/strata-gpu-coverage
# Needs g++ (with gcov), OpenBLAS, and a Meson build's include/strata/config.hpp
# (build/include; else the headers' defaults are used).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-/tmp/strata-gpu-coverage}
rm -rf "$work" && mkdir -p "$work/standin" "$work/host" "$work/mirrored"
config=()
[[ -f $root/build/include/strata/config.hpp ]] && config=(-I"$root/build/include")
cd "$work/standin"
g++ -std=c++20 --coverage -O0 -I"$root/include" "${config[@]}" \
  -isystem/usr/include/x86_64-linux-gnu/openblas-pthread/ -pthread \
  "$root/bench/coverage/gpu_step.cpp" -o gpu_step /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so
./gpu_step standin
# the same binary, its counts written under host/ (GCOV_PREFIX): the host's compute
strip=$(tr -cd / <<<"$work/standin" | wc -c)
GCOV_PREFIX=$work/host GCOV_PREFIX_STRIP=$strip ./gpu_step host
# the MLP under MirroredStrategy{virtual_gpus(0, 2)} on the stand-in, its counts under mirrored/
GCOV_PREFIX=$work/mirrored GCOV_PREFIX_STRIP=$strip ./gpu_step mirrored
cp gpu_step-gpu_step.gcno "$work/host/"
cp gpu_step-gpu_step.gcno "$work/mirrored/"
for run in standin host mirrored; do (cd "$work/$run" && gcov -j gpu_step-gpu_step.gcda >/dev/null); done
python3 "$root/bench/coverage/measure.py" "$root" "$work/standin/gpu_step-gpu_step.gcov.json.gz" \
  "$work/host/gpu_step-gpu_step.gcov.json.gz" "$work/mirrored/gpu_step-gpu_step.gcov.json.gz"
