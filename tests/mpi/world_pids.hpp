// MPI tests that stop and resume a rank (SIGSTOP, SIGCONT): this rank, the
// world's size, and every rank's process id, gathered over MPI_COMM_WORLD.
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <vector>

namespace strata_test {

struct WorldPids {
  int rank = 0;
  int size = 1;
  std::vector<int> pids;  //!< by rank
};

//! Collective over MPI_COMM_WORLD.
inline WorldPids world_pids() {
  WorldPids w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  w.pids.resize(static_cast<std::size_t>(w.size));
  const int mine = static_cast<int>(::getpid());
  MPI_Allgather(&mine, 1, MPI_INT, w.pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  return w;
}

}  // namespace strata_test
