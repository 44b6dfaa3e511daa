#pragma once
//! Shared memory or network: how the ranks of a communicator talk, agreed
//! by all of them (the automatic all-reduce choice and the direct
//! algorithm's message sizes depend on it, and every rank must decide alike).

#include <cstdlib>
#include <string>

#include <strata/comm/mpi/mpi.hpp>

namespace strata::detail::mpi {

//! What detect_transport found.
struct Transport {
  bool network = false;  //!< some rank talks over a network
  int node_size = 1;     //!< ranks on this rank's node
  std::string why;       //!< why network (empty in shared memory)
};

//! Collective over `comm` (of `size` ranks): network if any rank sees one,
//! because the ranks span nodes or Open MPI's shared-memory transport is off.
inline Transport detect_transport(MPI_Comm comm, int size) {
  Transport t;
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  MPI_Comm_size(node, &t.node_size);
  MPI_Comm_free(&node);
  int flags[2] = {t.node_size < size ? 1 : 0, 0};
  if (const char* btl = std::getenv("OMPI_MCA_btl"); btl && *btl) {
    // shared memory is off when "^..." excludes it, or a plain list leaves it out
    const std::string b = btl;
    const bool names_shm = b.find("vader") != std::string::npos || b.find("sm") != std::string::npos;
    flags[1] = (b[0] == '^') == names_shm ? 1 : 0;
  }
  int any[2] = {0, 0};
  check(MPI_Allreduce(flags, any, 2, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  t.network = any[0] || any[1];
  t.why = any[0] ? "ranks span several nodes" : any[1] ? "shared memory transport disabled (OMPI_MCA_btl)" : "";
  return t;
}

}  // namespace strata::detail::mpi
