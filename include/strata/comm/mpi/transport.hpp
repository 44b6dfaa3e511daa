#pragma once
//! Shared memory or network: how the ranks of a communicator talk, agreed
//! by all of them (the automatic all-reduce choice and the direct
//! algorithm's message sizes depend on it, and every rank must decide alike).

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include <strata/comm/mpi/mpi.hpp>

namespace strata::detail::mpi {

//! What detect_transport found.
struct Transport {
  bool network = false;  //!< some rank talks over a network
  int node_size = 1;     //!< ranks on this rank's node
  int node_rank = 0;     //!< this rank's index among them
  std::string why;       //!< why network (empty in shared memory)
  //! The communicator's identity, the same on every rank (the largest of
  //! their random draws): its abort notices carry it (notices.hpp).
  std::int64_t token = 0;
};

//! A draw no other communicator of this process made (a per-process random
//! start, then a counter, mixed by splitmix64).
inline std::int64_t fresh_token() {
  static const std::uint64_t start = [] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  static std::atomic<std::uint64_t> next{0};
  std::uint64_t z = start + 0x9e3779b97f4a7c15ULL * (next.fetch_add(1) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<std::int64_t>(z ^ (z >> 31));
}

//! Collective over `comm` (of `size` ranks): network if any rank sees one,
//! because the ranks span nodes or Open MPI's shared-memory transport is off.
//! Never blocks on an absent rank: the flags travel in non-blocking
//! all-reduces that `wait(request, what)` waits for under a deadline, and
//! MPI_Comm_split_type (no non-blocking form) runs only after the first of
//! them proved every rank present, within this rank's deadline (`still_in_time(what)` throws otherwise).
//! That first all-reduce also agrees on the communicator's token.
template <class Wait, class InTime>
Transport detect_transport(MPI_Comm comm, int size, Wait&& wait, InTime&& still_in_time) {
  Transport t;
  int btl_off = 0, any_btl_off = 0;
  if (const char* btl = std::getenv("OMPI_MCA_btl"); btl && *btl) {
    // shared memory is off when "^..." excludes it, or a plain list leaves it out
    const std::string b = btl;
    const bool names_shm = b.find("vader") != std::string::npos || b.find("sm") != std::string::npos;
    btl_off = (b[0] == '^') == names_shm ? 1 : 0;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  const std::int64_t mine[2] = {btl_off, fresh_token()};
  std::int64_t most[2] = {0, 0};
  check(MPI_Iallreduce(mine, most, 2, MPI_INT64_T, MPI_MAX, comm, &req), "MPI_Iallreduce");
  wait(req, "MPI_Iallreduce (every rank present before MPI_Comm_split_type)");
  any_btl_off = static_cast<int>(most[0]);
  t.token = most[1];
  still_in_time("MPI_Comm_split_type");
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  MPI_Comm_size(node, &t.node_size);
  MPI_Comm_rank(node, &t.node_rank);
  MPI_Comm_free(&node);
  int spans = t.node_size < size ? 1 : 0, any_spans = 0;
  check(MPI_Iallreduce(&spans, &any_spans, 1, MPI_INT, MPI_MAX, comm, &req), "MPI_Iallreduce");
  wait(req, "MPI_Iallreduce (agreeing on the transport)");
  const int any[2] = {any_spans, any_btl_off};
  t.network = any[0] || any[1];
  t.why = any[0] ? "ranks span several nodes" : any[1] ? "shared memory transport disabled (OMPI_MCA_btl)" : "";
  return t;
}

}  // namespace strata::detail::mpi
