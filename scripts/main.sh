#!/usr/bin/env bash
# The main job: install what is missing, build strata (release), and run the
# all-reduce benchmark over CPU replicas (one per core) next to Open MPI's
# MPI_Allreduce on as many ranks. (Training MNIST replaces this once the
# training layer lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release > /dev/null
ninja -C build > /dev/null
p=$(nproc)
echo "== strata all-reduce, $p CPU replicas in one process"
./build/bench/allreduce_bench --replicas "$p" --algo auto,direct,ring --min 64K --max 64M
if [ -x build/bench/mpi_allreduce_bench ]; then
  echo "== Open MPI MPI_Allreduce, $p ranks (shared memory), for comparison"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe -np "$p" ./build/bench/mpi_allreduce_bench --min 64K --max 64M
fi
echo "== the tour: fitting y = 3x + 2 with MirroredStrategy on $p replicas"
./build/examples/tour --strategy mirrored --replicas "$p"
