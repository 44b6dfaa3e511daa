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
  if (rank == 0)
    std::printf("%s on %d ranks: %s on %d rank(s)\n", what, size, ranks_failed ? "FAILED" : "passed",
                ranks_failed ? ranks_failed : size);
  return ranks_failed ? 1 : 0;
}

}  // namespace gpu_test
