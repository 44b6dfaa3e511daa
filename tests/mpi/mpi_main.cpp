// doctest under MPI: every rank runs every test case (each case is a
// collective program); a failure on any rank fails the run, and rank 0
// says on how many ranks. (Debian's doctest ships no MPI extension.) A run
// whose filters select no test case fails.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <unistd.h>

#include <strata/comm/mpi/runtime.hpp>

#include "support/count_selected.hpp"

int main(int argc, char** argv) {
  strata::detail::mpi::runtime();  // MPI_Init_thread; finalized at exit
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  doctest::Context ctx(argc, argv);
  if (rank != 0) ctx.setOption("minimal", true);  // other ranks speak only about failures
  if (!isatty(1)) ctx.setOption("no-colors", true);
  const int res = ctx.run();
  if (ctx.shouldExit()) return res;
  // a run whose filters select no test case fails (a unity group's program: support/count_selected.hpp)
  const bool none = strata_test::selected_test_cases() == 0;
  if (none && rank == 0) std::fprintf(stderr, "%s: no test case matches the filters: nothing was tested\n", argv[0]);
  int failed = res != 0 || none, ranks_failed = 0;
  MPI_Allreduce(&failed, &ranks_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("MPI tests on %d ranks: %s on %d rank(s)\n", size, ranks_failed ? "FAILED" : "passed",
                             ranks_failed ? ranks_failed : size);
  return ranks_failed ? 1 : 0;
}
