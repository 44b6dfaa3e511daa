#pragma once
//! Messages outside the collectives' data between the ranks of one MPI
//! communicator. Abort notices: a rank that
//! fails tells every other one why (a small message on tag_abort, sent
//! eagerly), and a rank that waits checks for one while it polls, so that
//! its wait ends at once with the failed rank's reason instead of at the
//! deadline. Exchange (exchange.hpp) sends and checks them; and the
//! messages it drops after a disagreement.
//!   detail::mpi::send_abort_notice(comm, rank, size, "rank 1: out of memory", timeout);
//!   if (auto n = detail::mpi::take_abort_notice(comm)) throw CollectiveAborted(n->why);

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/mpi/handles.hpp>
#include <strata/comm/mpi/mpi.hpp>

namespace strata::detail::mpi {

//! More ranks than cores: after a while of polling, let the awaited rank run.
inline void relax(int i) noexcept {
  if (i > 2000) std::this_thread::yield();
}

//! Tells every rank of `comm` but `rank` that it failed, `why` (its first
//! 2000 characters). Bounded: returns within min(timeout, 2 s) even if
//! ranks are gone.
inline void send_abort_notice(MPI_Comm comm, int rank, int size, const std::string& why,
                              std::chrono::milliseconds timeout) {
  const std::string msg = why.substr(0, 2000);  // small: sent eagerly, so it leaves even if nobody receives yet
  Pending sends;
  for (int r = 0; r < size; ++r)
    if (r != rank) {
      sends.reqs.push_back(MPI_REQUEST_NULL);
      MPI_Isend(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, r, tag_abort, comm, &sends.reqs.back());
    }
  const auto deadline = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(2));
  for (int i = 0; std::chrono::steady_clock::now() < deadline; ++i) {
    if (sends.test_all()) break;
    relax(i);
  }
}

//! An abort notice another rank sent on `comm`.
struct AbortNotice {
  int rank = 0;     //!< the rank that failed
  std::string why;  //!< its reason
};

//! The abort notice that has arrived on `comm`, if one has (taken: it is not seen twice).
inline std::optional<AbortNotice> take_abort_notice(MPI_Comm comm) {
  int flag = 0;
  MPI_Status st;
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Improbe(MPI_ANY_SOURCE, tag_abort, comm, &flag, &msg, &st);
  if (!flag) return std::nullopt;
  int count = 0;
  MPI_Get_count(&st, MPI_CHAR, &count);
  AbortNotice n{st.MPI_SOURCE, std::string(static_cast<std::size_t>(count), '\0')};
  // matched and small (sent eagerly): already here, so this receive does not wait on the sender
  MPI_Mrecv(n.why.data(), count, MPI_CHAR, &msg, MPI_STATUS_IGNORE);
  return n;
}

//! Receives and drops what has arrived from `source` on `tag`, up to `left`
//! bytes (counted down); whether bytes are still to come. For messages a
//! disagreement made pointless: taken so that the communicator stays consistent.
inline bool drop_arrived(MPI_Comm comm, int source, int tag, std::size_t& left, std::vector<std::byte>& sink) {
  while (left) {
    int flag = 0, count = 0;
    MPI_Message msg;
    MPI_Status st;
    MPI_Improbe(source, tag, comm, &flag, &msg, &st);
    if (!flag) break;
    MPI_Get_count(&st, MPI_BYTE, &count);
    sink.resize(static_cast<std::size_t>(count));
    MPI_Mrecv(sink.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    left -= std::min(left, static_cast<std::size_t>(count));
  }
  return left != 0;
}

}  // namespace strata::detail::mpi
