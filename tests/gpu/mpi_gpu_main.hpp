#pragma once
// main() of the GPU tests that run under mpirun: doctest on every rank (as
// tests/mpi/mpi_main.cpp), but skipped (exit 77) on every rank before MPI
// starts when there is no GPU; rank 0 prints one line for all ranks.
//   int main(int argc, char** argv) { return gpu_test::mpi_main(argc, argv, "NCCL MPI tests"); }
// The including file defines DOCTEST_CONFIG_IMPLEMENT before <doctest/doctest.h>.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>

#include <strata/comm/mpi/communicator.hpp>
#include <strata/cuda/device.hpp>

#include "skip.hpp"

namespace gpu_test {

inline int mpi_main(int argc, char** argv, const char* what) {
  if (strata::cuda::device_count() == 0) {
    std::puts("skipped: no GPU (strata::cuda::device_count() == 0)");
    return 77;
  }
  strata::detail::mpi::runtime();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  doctest::Context ctx(argc, argv);
  if (rank != 0) ctx.setOption("minimal", true);
  if (!isatty(1)) ctx.setOption("no-colors", true);
  const int res = ctx.run();
  if (ctx.shouldExit()) return res;
  int failed = res != 0, ranks_failed = 0;
  MPI_Allreduce(&failed, &ranks_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int skipped = gpu_test::skipped().empty() ? 0 : 1, ranks_skipped = 0;  // skip.hpp: a case that cannot run here
  MPI_Allreduce(&skipped, &ranks_skipped, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("%s on %d ranks: %s on %d rank(s)\n", what, size,
                ranks_failed ? "FAILED" : ranks_skipped ? "skipped" : "passed",
                ranks_failed ? ranks_failed : ranks_skipped ? ranks_skipped : size);
  if (ranks_failed) return 1;
  if (ranks_skipped) {  // every rank exits 77 (mpirun's status), rank 0 printing its reasons
    if (rank == 0) (void)gpu_test::skip_status(0);
    return 77;
  }
  return 0;
}

}  // namespace gpu_test
