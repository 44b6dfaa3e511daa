#pragma once
//! The messages of the parameter server over MPI, shared by the chief, the
//! servers and the workers: the tags, and this rank's end of the protocol,
//! an MpiCommunicator of its own over which they travel as the
//! communicator's headerless tagged messages (comm/mpi/point_to_point.hpp:
//! started without waiting, waited for through the one bounded wait); and
//! where each server's shards sit in the flat vector of all variables. The
//! chief sends and waits from several threads (one per worker rank, as the
//! Coordinator runs them, plus the training loop): every MPI call holds the
//! process-wide MPI lock (SerialMpi), a wait only for each look, so
//! MPI_THREAD_SERIALIZED suffices. Every wait is bounded by the timeout and
//! raises CollectiveTimeout naming this rank, what it waited for and the
//! peers that did not answer.
//!   detail::PsLink link{MPI_COMM_WORLD, 30s};
//!   auto st = link.probe(chief, {detail::kStep, detail::kEnd}, "the chief's next step");

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/mpi/communicator.hpp>
#include <strata/comm/mpi/point_to_point.hpp>
#include <strata/ps/partitioner.hpp>

namespace strata::detail {

//! Message tags of the parameter-server protocol (in its own communicator).
enum PsTag : int { kAssign = 7101, kPull, kPullReply, kPush, kAck, kApply, kDrop, kRead, kReadReply, kStep, kStepX,
                   kStepY, kResult, kFailed, kEnd, kAssignState, kReadState, kReadStateReply };

//! This rank's end of the protocol: its own MpiCommunicator, and the
//! bounded tagged messages on it.
class PsLink {
 public:
  //! Messages of one exchange in flight, with the buffers MPI uses for them
  //! (given up with them if a wait times out: MPI may still use them).
  using Requests = mpi::Requests;
  //! A message probe() found (source, tag), to be received with recv_all().
  using Message = mpi::Probed;

  //! Duplicates `world` without blocking: a rank that never gets here is
  //! reported (CollectiveTimeout after `timeout`), not waited for.
  PsLink(MPI_Comm world, std::chrono::milliseconds timeout)
      : comm_(MpiCommunicator::duplicate(world, MpiOptions{.timeout = timeout})) {}
  PsLink(const PsLink&) = delete;
  PsLink& operator=(const PsLink&) = delete;

  [[nodiscard]] int rank() const noexcept { return comm_.rank(); }
  [[nodiscard]] int size() const noexcept { return comm_.size(); }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return comm_.options().timeout; }
  //! How this rank names itself in errors ("chief", "server", "worker").
  void set_role_name(std::string name) { role_ = std::move(name); }
  //! How every rank is named in errors, by rank ("chief", "server", ...).
  void set_role_names(std::vector<std::string> names) { roles_ = std::move(names); }
  //! "rank 2 (worker)".
  [[nodiscard]] std::string name_of(int rank) const {
    const auto r = static_cast<std::size_t>(rank);
    return "rank " + std::to_string(rank) + (r < roles_.size() && !roles_[r].empty() ? " (" + roles_[r] + ")" : "");
  }

  //! Starts receiving `src`'s next message under `tag` into `n` elements at
  //! `buf` (owned by `r.keep`, or alive until the wait returns), into `r`.
  template <mpi::Framed T>
  void irecv(Requests& r, T* buf, std::size_t n, int src, int tag) {
    comm_.post_recv(r, buf, n, src, tag);
  }
  //! Starts sending `n` elements at `buf` (as irecv's) to `dst` under `tag`, into `r`.
  template <mpi::Framed T>
  void isend(Requests& r, const T* buf, std::size_t n, int dst, int tag) {
    comm_.post_send(r, buf, n, dst, tag);
  }
  //! Starts sending an empty message (a request, an acknowledgement) to `dst`.
  void isend_empty(Requests& r, int dst, int tag) { comm_.post_send(r, static_cast<const float*>(nullptr), 0, dst, tag); }
  //! Sends `data` to `dst` under `tag` and waits until it has left.
  template <mpi::Framed T>
  void send(std::vector<T> data, int dst, int tag) {
    Requests r;
    auto kept = std::make_shared<std::vector<T>>(std::move(data));
    r.keep.push_back(kept);
    isend(r, kept->data(), kept->size(), dst, tag);
    wait_all(r, "a message to " + name_of(dst), false);
  }
  //! Sends an empty message to `dst` under `tag` and waits until it has left.
  void send_empty(int dst, int tag) { send(std::vector<float>{}, dst, tag); }
  //! Waits for every request of `r`, at most the timeout; past it,
  //! CollectiveTimeout naming what it waited for and (with `name_peers`, when
  //! `what` does not) the peers that did not take part ("... for the end of
  //! training to reach every rank; no answer from rank 2 (worker)"); the
  //! requests not complete are given up with r.keep.
  void wait_all(Requests& r, const std::string& what, bool name_peers = true) {
    comm_.await(r, [&](const std::vector<int>& missing) { return timed_out(what, name_peers ? missing : none()); });
  }
  //! Waits for a message with one of `tags` from `src` (MPI_ANY_SOURCE:
  //! anyone), at most the timeout.
  Message probe(int src, std::initializer_list<int> tags, const std::string& what) {
    return comm_.probe_tagged(src, std::span<const int>(tags.begin(), tags.size()),
                              [&](const std::vector<int>& missing) { return timed_out(what, missing); });
  }
  //! Receives the message `m` announced, whole (bounded by the timeout: a
  //! large message's data may still have to come from its sender).
  template <mpi::Framed T>
  std::vector<T> recv_all(Message& m) {
    return comm_.recv_probed<T>(
        m, [&](const std::vector<int>&) { return timed_out("the rest of a message from " + name_of(m.source), none()); });
  }
  //! Every rank's `mine` (fixed size, the same everywhere) gathered into
  //! `all` (sized for every rank's) in rank order: the communicator's
  //! all-gather, under its contract and timeout.
  void all_gather(const std::vector<std::int64_t>& mine, std::vector<std::int64_t>& all) { comm_.all_gather(mine, all); }
  //! The error about to be raised, every rank raises from the last all-gather (MpiCommunicator::agreed_failure).
  void agreed_failure() noexcept { comm_.agreed_failure(); }

 private:
  static const std::vector<int>& none() {
    static const std::vector<int> n;
    return n;
  }
  //! "strata: rank 0 (chief) waited 2000 ms for <what>; no answer from rank 2 (worker 0)".
  [[nodiscard]] std::string timed_out(const std::string& what, const std::vector<int>& missing) const {
    std::string s = "strata: rank " + std::to_string(rank()) + (role_.empty() ? "" : " (" + role_ + ")") + " waited " +
                    std::to_string(timeout().count()) + " ms for " + what;
    for (std::size_t i = 0; i < missing.size(); ++i) s += (i ? ", " : "; no answer from ") + name_of(missing[i]);
    return s;
  }

  MpiCommunicator comm_;
  std::string role_;
  std::vector<std::string> roles_;  // every rank's, for errors
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
