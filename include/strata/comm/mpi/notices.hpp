#pragma once
//! Messages between the ranks of one MPI communicator outside the
//! collectives' data. Abort notices: a rank that fails tells every other
//! one why (a small eager message on tag_abort), and a rank that waits
//! checks for one while it polls, so its wait ends at once with the failed
//! rank's reason. Exchange (exchange.hpp) sends and checks them, and drops
//! the leftover messages after a disagreement. A communicator that carried a
//! notice is never freed, and every notice carries its communicator's token
//! (transport.hpp), so a late one reaching a later communicator with the
//! same MPI context is dropped. LiveComms lists every live communicator, so
//! that std::terminate tells the peers on all of them.
//!   detail::mpi::send_abort_notice(comm, rank, size, token, "rank 1: out of memory", timeout);
//!   if (auto n = detail::mpi::take_abort_notice(comm, token)) throw CollectiveAborted(n->why);

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <exception>

#include <strata/comm/mpi/handles.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/runtime.hpp>
#include <strata/core/error.hpp>

namespace strata::detail::mpi {

//! More ranks than cores: after a while of polling, let the awaited rank run.
inline void relax(int i) noexcept {
  if (i > 2000) std::this_thread::yield();
}

//! Tells every rank of `comm` (whose token is `token`) but `rank` that it
//! failed, `why` (its first 2000 characters). Bounded: returns within
//! min(timeout, 2 s) even if ranks are gone.
inline void send_abort_notice(MPI_Comm comm, int rank, int size, std::int64_t token, const std::string& why,
                              std::chrono::milliseconds timeout) {
  // small: sent eagerly, so it leaves even if nobody receives yet
  std::string msg(sizeof token, '\0');
  std::memcpy(msg.data(), &token, sizeof token);
  msg += why.substr(0, 2000);
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

//! The abort notice that has arrived on `comm` (whose token is `token`), if
//! one has (taken: it is not seen twice). Notices of an earlier communicator
//! given the same context (another token) are taken and dropped.
inline std::optional<AbortNotice> take_abort_notice(MPI_Comm comm, std::int64_t token) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Improbe(MPI_ANY_SOURCE, tag_abort, comm, &flag, &msg, &st);
    if (!flag) return std::nullopt;
    int count = 0;
    MPI_Get_count(&st, MPI_CHAR, &count);
    std::string body(static_cast<std::size_t>(count), '\0');
    // matched and small (sent eagerly): already here, so this receive does not wait on the sender
    MPI_Mrecv(body.data(), count, MPI_CHAR, &msg, MPI_STATUS_IGNORE);
    std::int64_t theirs = 0;
    if (body.size() < sizeof theirs) continue;  // not a notice of strata's
    std::memcpy(&theirs, body.data(), sizeof theirs);
    if (theirs == token) return AbortNotice{st.MPI_SOURCE, body.substr(sizeof theirs)};
  }
}

//! A live communicator, as an uncaught exception's notices need it: listed
//! while it lives (at a fixed address: Exchange holds it by pointer).
struct LiveComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::int64_t token = 0;  //!< its notices carry it
  std::chrono::milliseconds timeout{0};
  //! Its peers know already, or need not be told (it failed, or was told of a failure).
  std::atomic<bool> settled{false};
  //! Live when this process saw a failure: never freed (LiveComms::keep_all).
  std::atomic<bool> kept{false};
};

//! Every live communicator of this process.
class LiveComms {
 public:
  static LiveComms& get() {
    static LiveComms l;
    return l;
  }
  void add(LiveComm* c) {
    std::lock_guard lk(mu_);
    all_.push_back(c);
  }
  void remove(LiveComm* c) {
    std::lock_guard lk(mu_);
    std::erase(all_, c);
  }
  //! A failure was seen (a timeout, a notice, this rank's own): every
  //! communicator live now is never freed. A peer may have sent this rank
  //! a message on any of them that it will never take (a pipeline stage's
  //! activation, a ring's chunk); Open MPI keeps a message that reaches a
  //! freed context until a new communicator gets it, and would deliver it
  //! there. Kept, the context is never given again in this process.
  void keep_all() {
    std::lock_guard lk(mu_);
    for (LiveComm* c : all_) c->kept = true;
  }
  //! Sends `why` to the peers on every live communicator not settled (and settles it).
  void tell_all(const std::string& why) {
    std::lock_guard lk(mu_);
    for (LiveComm* c : all_)
      if (!c->settled.exchange(true)) send_abort_notice(c->comm, c->rank, c->size, c->token, why, c->timeout);
  }

 private:
  std::mutex mu_;
  std::vector<LiveComm*> all_;
};

//! This process saw a failure (a wait that timed out, an abort notice, its
//! own): the exit waits at most `timeout` for the others (runtime.hpp), and
//! every communicator live now is never freed (LiveComms::keep_all).
inline void failure_seen(std::chrono::milliseconds timeout) {
  runtime().note_failure(timeout);
  LiveComms::get().keep_all();
}

//! CommHandle::dup, whose timeout is a failure seen: the communicators live
//! then are kept, as after any other failure (the peers that did not take
//! part may still send on them).
inline CommHandle dup_communicator(MPI_Comm parent, std::chrono::milliseconds timeout) {
  try {
    return CommHandle::dup(parent, timeout);
  } catch (const CollectiveTimeout&) {
    failure_seen(timeout);
    throw;
  }
}

//! Tells the peers on every live communicator that this rank failed with
//! `e` (an exception no one caught), so that their collectives end at once
//! naming this rank and its message, instead of at their deadline. Bounded.
inline void tell_peers_of(const std::exception_ptr& e) noexcept {
  try {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin) return;
    const std::string why = e ? "an exception no one caught ended it (std::terminate): " + detail::what_of(e)
                              : std::string("std::terminate ended it (no exception)");
    const SerialMpi lock("telling the other ranks of an uncaught exception", std::chrono::seconds(2), std::nothrow);
    LiveComms::get().tell_all(why);
  } catch (...) {
  }
}

//! The terminate handler before strata's (called after the notices).
inline std::terminate_handler& previous_terminate() noexcept {
  static std::terminate_handler h = nullptr;
  return h;
}

//! strata's terminate handler, from the first MPI communicator on: tells
//! the peers (tell_peers_of the exception being handled), then runs the
//! handler there was before (the default prints the exception and aborts).
[[noreturn]] inline void terminate_telling_peers() noexcept {
  tell_peers_of(std::current_exception());
  if (std::terminate_handler h = previous_terminate()) h();
  std::abort();
}

//! Installs terminate_telling_peers once per process.
inline void install_terminate_notices() {
  static const bool installed = [] {
    previous_terminate() = std::set_terminate(&terminate_telling_peers);
    return true;
  }();
  (void)installed;
}

//! A communicator on the list that terminate_telling_peers tells, for this
//! object's lifetime (installs that handler); settle() when its peers know
//! of a failure already.
class ListedComm {
 public:
  ListedComm(MPI_Comm comm, int rank, int size, std::int64_t token, std::chrono::milliseconds timeout)
      : c_(new LiveComm) {
    c_->comm = comm;
    c_->rank = rank;
    c_->size = size;
    c_->token = token;
    c_->timeout = timeout;
    LiveComms::get().add(c_.get());
    install_terminate_notices();
  }
  ListedComm(ListedComm&&) noexcept = default;
  ListedComm& operator=(ListedComm&& o) noexcept {
    if (this != &o) {
      if (c_) LiveComms::get().remove(c_.get());
      c_ = std::move(o.c_);
    }
    return *this;
  }
  ~ListedComm() {
    if (c_) LiveComms::get().remove(c_.get());
  }
  void settle() noexcept {
    if (c_) c_->settled = true;
  }
  //! Whether a failure seen while it lived means it must never be freed (LiveComms::keep_all).
  [[nodiscard]] bool kept() const noexcept { return c_ && c_->kept; }

 private:
  std::unique_ptr<LiveComm> c_;
};

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
