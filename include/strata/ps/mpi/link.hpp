#pragma once
//! The messages of the parameter server over MPI, shared by the chief, the
//! servers and the workers: the tags, bounded sends, receives and probes on
//! a private communicator, and where each server's shards sit in the flat
//! vector of all variables. MPI runs MPI_THREAD_SERIALIZED, and the chief
//! calls it from several threads (one per worker rank, as the Coordinator
//! runs them, plus the training loop), so every call goes through one lock.
//! Every wait is bounded by the timeout and raises CollectiveTimeout naming
//! this rank and what it waited for.
//!   detail::PsLink link{MPI_COMM_WORLD, 30s};
//!   auto st = link.probe(chief, {detail::kStep, detail::kEnd}, "the chief's next step");

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/comm/mpi/handles.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/runtime.hpp>
#include <strata/ps/partitioner.hpp>

namespace strata::detail {

//! Message tags of the parameter-server protocol (in its own communicator).
enum PsTag : int { kAssign = 7101, kPull, kPullReply, kPush, kAck, kApply, kDrop, kRead, kReadReply, kStep, kStepX,
                   kStepY, kResult, kFailed, kEnd, kAssignState, kReadState, kReadStateReply };

//! Point-to-point requests given up at their deadline, with the buffers MPI
//! may still read or write for them (a late peer's reply lands there): kept
//! for the life of the process, never freed nor reused, as comm/mpi keeps
//! its abandoned collectives (activity.hpp's graveyard).
struct PsAbandoned {
  std::vector<MPI_Request> reqs;
  std::vector<std::shared_ptr<void>> buffers;
};
inline std::vector<PsAbandoned>& ps_graveyard() {
  static auto* g = new std::vector<PsAbandoned>;  // never destroyed: MPI may still use it at exit
  return *g;
}
inline std::mutex& ps_graveyard_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

//! This rank's end of the protocol: a duplicate of the job's communicator,
//! and bounded, serialized point-to-point calls on it.
class PsLink {
 public:
  //! Duplicates `world` without blocking: a rank that never gets here is
  //! reported (CollectiveTimeout after `timeout`), not waited for.
  PsLink(MPI_Comm world, std::chrono::milliseconds timeout)
      : timeout_(timeout), comm_(((void)mpi::runtime(), mpi::CommHandle::dup(world, timeout))) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  PsLink(const PsLink&) = delete;
  PsLink& operator=(const PsLink&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  //! How this rank names itself in errors ("chief", "server", "worker").
  void set_role_name(std::string name) { role_ = std::move(name); }
  //! How every rank is named in errors, by rank ("chief", "server", ...).
  void set_role_names(std::vector<std::string> names) { roles_ = std::move(names); }
  //! "rank 2 (worker)".
  [[nodiscard]] std::string name_of(int rank) const {
    const auto r = static_cast<std::size_t>(rank);
    return "rank " + std::to_string(rank) + (r < roles_.size() && !roles_[r].empty() ? " (" + roles_[r] + ")" : "");
  }

  MPI_Request irecv(void* buf, std::size_t n, int src, int tag, MPI_Datatype t = MPI_FLOAT) {
    MPI_Request r;
    std::lock_guard lk(mu_);
    mpi::check(MPI_Irecv(buf, mpi::as_count(n, "a parameter-server message"), t, src, tag, comm_, &r), "MPI_Irecv");
    return r;
  }
  MPI_Request isend(const void* buf, std::size_t n, int dst, int tag, MPI_Datatype t = MPI_FLOAT) {
    MPI_Request r;
    std::lock_guard lk(mu_);
    mpi::check(MPI_Isend(buf, mpi::as_count(n, "a parameter-server message"), t, dst, tag, comm_, &r), "MPI_Isend");
    return r;
  }
  void send(const void* buf, std::size_t n, int dst, int tag, MPI_Datatype t = MPI_FLOAT) {
    std::vector<MPI_Request> v{isend(buf, n, dst, tag, t)};
    wait_all(v, "a message to " + name_of(dst));
  }
  //! Waits for every request, at most the timeout. `peers` (one per
  //! request, when given): the rank each request exchanges with, so that a
  //! timeout names the ranks that did not take part ("... for the end of
  //! training sent to every rank; rank 2 (worker) did not take it").
  //! `keep`: the buffers the requests read or write (on the heap). On a
  //! timeout the requests not complete are abandoned, and `keep` with them
  //! (ps_graveyard(), for the life of the process): MPI may still use them.
  //! A caller whose buffers are its own locals must pass them here.
  void wait_all(std::vector<MPI_Request>& reqs, const std::string& what, std::span<const int> peers = {},
                std::vector<std::shared_ptr<void>> keep = {}) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (int spins = 0;; ++spins) {
      int done = 0;
      {
        std::lock_guard lk(mu_);
        mpi::check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      }
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        const std::string who = missing(reqs, peers);
        abandon(reqs, std::move(keep));
        timed_out(what + who);
      }
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  //! Gives up `reqs` (those not complete) and `keep` to ps_graveyard().
  static void abandon(std::vector<MPI_Request>& reqs, std::vector<std::shared_ptr<void>> keep) {
    PsAbandoned a{{}, std::move(keep)};
    for (MPI_Request& r : reqs)
      if (r != MPI_REQUEST_NULL) a.reqs.push_back(std::exchange(r, MPI_REQUEST_NULL));
    std::lock_guard g(ps_graveyard_mutex());
    ps_graveyard().push_back(std::move(a));
  }
  //! A message taken off the queue by probe() (matched: no other thread can
  //! receive it), to be received with recv_all().
  struct Message {
    int source = -1, tag = -1;
    MPI_Status status{};
    MPI_Message handle = MPI_MESSAGE_NULL;
  };
  //! A message with one of `tags` from `src` (MPI_ANY_SOURCE: anyone) if one is waiting.
  bool poll(int src, std::initializer_list<int> tags, Message& m) {
    std::lock_guard lk(mu_);
    for (int tag : tags) {
      int flag = 0;
      mpi::check(MPI_Improbe(src, tag, comm_, &flag, &m.handle, &m.status), "MPI_Improbe");
      if (flag) {
        m.source = m.status.MPI_SOURCE;
        m.tag = m.status.MPI_TAG;
        return true;
      }
    }
    return false;
  }
  //! Waits for a message with one of `tags` from `src`, at most the timeout.
  Message probe(int src, std::initializer_list<int> tags, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    Message m;
    for (int spins = 0;; ++spins) {
      if (poll(src, tags, m)) return m;
      if (std::chrono::steady_clock::now() > deadline) timed_out(what);
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  //! Receives the message `m` announced, whole (MPI_Imrecv, bounded by the
  //! timeout: a large message's data may still have to come from its sender).
  template <class T>
  std::vector<T> recv_all(Message& m, MPI_Datatype t) {
    int n = 0;
    MPI_Get_count(&m.status, t, &n);
    auto v = std::make_shared<std::vector<T>>(static_cast<std::size_t>(n));
    std::vector<MPI_Request> reqs(1, MPI_REQUEST_NULL);
    {
      std::lock_guard lk(mu_);
      mpi::check(MPI_Imrecv(v->data(), n, t, &m.handle, reqs.data()), "MPI_Imrecv");
    }
    wait_all(reqs, "the rest of a message from " + name_of(m.source), {}, {v});  // MPI may still write it
    return std::move(*v);
  }
  //! Every rank's `mine` (fixed size, the same everywhere) gathered into
  //! `all` in rank order by a non-blocking all-gather, bounded by the timeout.
  void all_gather(const std::vector<std::int64_t>& mine, std::vector<std::int64_t>& all,
                  const std::string& what = "every rank to agree on the cluster and the run") {
    // on the heap: a collective MPI cannot cancel keeps its buffers if it times out
    auto send = std::make_shared<std::vector<std::int64_t>>(mine);
    auto got = std::make_shared<std::vector<std::int64_t>>(mine.size() * static_cast<std::size_t>(size_));
    const int n = mpi::as_count(mine.size(), "an all-gather");
    std::vector<MPI_Request> reqs(1, MPI_REQUEST_NULL);
    {
      std::lock_guard lk(mu_);
      mpi::check(MPI_Iallgather(send->data(), n, MPI_INT64_T, got->data(), n, MPI_INT64_T, comm_, reqs.data()),
                 "MPI_Iallgather");
    }
    try {
      wait_all(reqs, what + " (an all-gather over all " + std::to_string(size_) + " ranks)", {}, {send, got});
    } catch (...) {
      comm_.keep_forever();  // a collective MPI cannot cancel may still use it
      throw;
    }
    all = std::move(*got);
  }
  //! "; no answer from rank 2 (worker)": the peers of the requests not
  //! complete (each tested once more; a complete one is freed, as after a
  //! wait). Empty without peers.
  std::string missing(std::vector<MPI_Request>& reqs, std::span<const int> peers) {
    if (peers.size() != reqs.size()) return {};
    std::vector<int> who;
    {
      std::lock_guard lk(mu_);
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        int flag = 1;
        if (reqs[i] != MPI_REQUEST_NULL) MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        if (!flag && std::find(who.begin(), who.end(), peers[i]) == who.end()) who.push_back(peers[i]);
      }
    }
    if (who.empty()) return {};
    std::sort(who.begin(), who.end());
    std::string s = "; no answer from ";
    for (std::size_t i = 0; i < who.size(); ++i) s += (i ? ", " : "") + name_of(who[i]);
    return s;
  }
  [[noreturn]] void timed_out(const std::string& what) const {
    mpi::runtime().note_failure(timeout_);  // the job's exit must not wait for this rank's peers forever
    throw CollectiveTimeout("strata: rank " + std::to_string(rank_) + (role_.empty() ? "" : " (" + role_ + ")") +
                            " waited " + std::to_string(timeout_.count()) + " ms for " + what);
  }

 private:
  std::chrono::milliseconds timeout_;
  mpi::CommHandle comm_;
  int rank_ = 0, size_ = 0;
  std::string role_;
  std::vector<std::string> roles_;  // every rank's, for errors
  std::mutex mu_;  // MPI_THREAD_SERIALIZED: one call at a time
};

//! Where each server's shards sit in the flat vector of all variables
//! (shard i on server i mod servers), and the gather/scatter between the
//! two. The same on every rank (every rank creates the same variables).
class ServerLayout {
 public:
  ServerLayout() = default;
  ServerLayout(std::vector<Range> shards, int servers)
      : shards_(std::move(shards)), by_server_(static_cast<std::size_t>(servers)) {
    for (std::size_t i = 0; i < shards_.size(); ++i) by_server_[i % by_server_.size()].push_back(i);
  }
  [[nodiscard]] const std::vector<Range>& shards() const noexcept { return shards_; }
  [[nodiscard]] std::size_t servers() const noexcept { return by_server_.size(); }
  //! Shards of server `s`, in order.
  [[nodiscard]] const std::vector<std::size_t>& of(std::size_t s) const { return by_server_.at(s); }
  //! Elements server `s` holds.
  [[nodiscard]] std::size_t count_of(std::size_t s) const {
    std::size_t n = 0;
    for (std::size_t i : of(s)) n += shards_[i].size();
    return n;
  }
  //! Server `s`'s elements of `all`, end to end.
  [[nodiscard]] std::vector<float> gather(std::size_t s, std::span<const float> all) const {
    std::vector<float> out;
    out.reserve(count_of(s));
    for (std::size_t i : of(s))
      out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(shards_[i].begin),
                 all.begin() + static_cast<std::ptrdiff_t>(shards_[i].end));
    return out;
  }
  //! The inverse: server `s`'s elements `in` put back into `all`.
  void scatter(std::size_t s, std::span<const float> in, std::span<float> all) const {
    std::size_t at = 0;
    for (std::size_t i : of(s)) {
      std::copy_n(in.data() + at, shards_[i].size(), all.data() + shards_[i].begin);
      at += shards_[i].size();
    }
  }

 private:
  std::vector<Range> shards_;
  std::vector<std::vector<std::size_t>> by_server_;
};

}  // namespace strata::detail
