#pragma once
//! What an MPI rank is doing while it waits, and how errors name it: the
//! activity (a collective, one message, a set-up step), the ranks that never
//! arrived with the last collective each completed, and the collectives
//! given up at their deadline (kept for the life of the process). Used by
//! Exchange (exchange.hpp).
//!   throw CollectiveTimeout("strata: " + describe(now, seq, call) + ": " + who_never_arrived(got, last_seen));

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/threads/call.hpp>
#include <strata/core/trace.hpp>

namespace strata::detail::mpi {

//! What a rank is doing while it waits: a collective, or one message to or
//! from a peer (the words every error names it with).
struct Activity {
  enum Kind : std::uint8_t { collective, send, recv, setup } kind = collective;
  int peer = -1, tag = -1;
  std::size_t count = 0;
  std::string_view dtype{};
  std::string_view call{};  //!< setup: what is being set up ("creating a communicator")
};

//! A wait's span in the trace (core/trace.hpp) says what it waits for: the
//! peer and tag of a message, else the collective's number.
inline void trace_wait(trace::Span& span, const Activity& now, std::uint64_t seq) {
  if (now.kind == Activity::send || now.kind == Activity::recv) {
    span.arg({now.kind == Activity::send ? "to" : "from", now.peer});
    span.arg({"tag", now.tag});
  } else {
    span.arg({"call", seq});
  }
}

//! A non-blocking collective given up at its deadline: MPI offers no way to
//! cancel or free it, so its request and the memory it may still touch (our
//! staging, counts) are kept until the process ends, never reused.
struct Abandoned {
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<std::byte> staging;
  std::vector<int> counts, displs;
};

//! A test seam, null in programs: called on this rank once a collective's
//! contract has agreed, before its data moves (tests stop a rank there to
//! show that the data phase's deadline holds too).
inline void (*after_contract_hook)(std::uint64_t seq) = nullptr;

//! Collectives given up at their deadline, for the life of the process.
inline std::vector<Abandoned>& graveyard() {
  static std::vector<Abandoned>* g = new std::vector<Abandoned>;  // never destroyed: MPI may still use it at exit
  return *g;
}

//! Gives up request `req` (set null) with the memory it may still touch.
inline void abandon(MPI_Request& req, std::vector<std::byte>& staging, std::vector<int>& counts,
                    std::vector<int>& displs) {
  graveyard().push_back(Abandoned{req, std::move(staging), std::move(counts), std::move(displs)});
  req = MPI_REQUEST_NULL;
}

//! "collective #3 all_reduce(...)", "recv(from rank 1, tag 7, 1000 float32)", or the set-up step.
inline std::string describe(const Activity& now, std::uint64_t seq, const CallDesc& call) {
  if (now.kind == Activity::setup) return std::string(now.call);
  if (now.kind == Activity::collective) return "collective #" + std::to_string(seq) + " " + call.str();
  std::string s = now.kind == Activity::send ? "send(to rank " : "recv(from rank ";
  s += std::to_string(now.peer);
  s += ", tag ";
  s += std::to_string(now.tag);
  s += ", ";
  s += std::to_string(now.count);
  s += ' ';
  s += now.dtype;
  s += ')';
  return s;
}

//! Every rank of `size` but `rank` ("1", "0, 2, 3").
inline std::string all_ranks_but(int rank, int size) {
  std::string s;
  for (int r = 0; r < size; ++r)
    if (r != rank) {
      if (!s.empty()) s += ", ";
      s += std::to_string(r);
    }
  return s;
}

//! The ranks whose header did not arrive (`got`, per rank), each with the
//! last collective it completed with us (`last_seen`).
inline std::string who_never_arrived(std::span<const char> got, std::span<const std::uint64_t> last_seen) {
  std::string who, report;
  for (std::size_t r = 0; r < got.size(); ++r)
    if (!got[r]) {
      if (!who.empty()) who += ", ";
      who += std::to_string(r);
      const auto last = last_seen[r];
      // appended piece by piece: GCC 12 -O3 warns falsely (-Wrestrict) on "#" + string
      report += "\n  rank ";
      report += std::to_string(r);
      report += ": last completed collective ";
      if (last) {
        report += '#';
        report += std::to_string(last);
      } else {
        report += "none";
      }
    }
  if (who.empty()) return "every rank arrived, but the headers this rank sent were not received";
  return "rank(s) " + who + " never arrived" + report;
}

}  // namespace strata::detail::mpi
