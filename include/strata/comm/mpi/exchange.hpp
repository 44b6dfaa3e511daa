#pragma once
//! The contract exchange over MPI, and the waiting every MPI call shares.
//! Before a collective moves data, every rank's call (sequence number, kind,
//! operation, dtype, counts, root, algorithm) reaches every other rank in a
//! fixed-size header (with the direct algorithm's data when both are small),
//! so ranks that disagree all raise the same CollectiveMismatch instead of
//! hanging or corrupting memory. Waiting is polling under a deadline: abort
//! notices from other ranks and the caller's interrupt flag are honoured
//! while waiting, and nothing waits longer than MpiOptions::timeout. The
//! all-reduces (all_reduce.hpp) and messages (point_to_point.hpp) wait here.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <strata/comm/mpi/activity.hpp>
#include <strata/comm/mpi/bounded_wait.hpp>
#include <strata/comm/mpi/notices.hpp>
#include <strata/comm/mpi/contract.hpp>
#include <strata/comm/mpi/handles.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/options.hpp>
#include <strata/comm/mpi/runtime.hpp>
#include <strata/comm/mpi/transport.hpp>

namespace strata::detail::mpi {

class Exchange {
 public:
  //! Duplicates `parent` without blocking (a rank that never calls this is
  //! reported, not waited for) and agrees on shared memory or network.
  //! The transport is agreed by non-blocking collectives under the same
  //! deadline (MPI_Comm_split_type, which has no non-blocking form, runs
  //! only once every rank is known present).
  Exchange(MPI_Comm parent, MpiOptions opts) : comm_(dup_communicator(parent, opts.timeout)), opts_(std::move(opts)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    last_seen_.assign(static_cast<std::size_t>(size_), 0);
    inbox_.resize(static_cast<std::size_t>(size_));
    calls_.resize(static_cast<std::size_t>(size_));
    begin_setup("creating a communicator");
    t_ = detect_transport(
        comm_, size_, [&](MPI_Request& req, std::string_view what) { wait_collective(req, what); },
        [&](std::string_view what) { check_still_in_time(what); });
    now_ = Activity{};
    live_.emplace(comm_, rank_, size_, t_.token, opts_.timeout);
  }

  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  [[nodiscard]] std::int64_t token() const noexcept { return t_.token; }  //!< its abort notices carry it
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] const MpiOptions& options() const noexcept { return opts_; }
  [[nodiscard]] bool network() const noexcept { return t_.network; }
  [[nodiscard]] const std::string& network_why() const noexcept { return t_.why; }
  [[nodiscard]] int node_size() const noexcept { return t_.node_size; }
  [[nodiscard]] int node_rank() const noexcept { return t_.node_rank; }
  [[nodiscard]] std::uint64_t completed() const noexcept { return completed_; }
  [[nodiscard]] const std::string& poisoned() const noexcept { return poisoned_; }
  //! Every rank's call of the collective in progress (index = rank).
  [[nodiscard]] const WireCall& call_of(int r) const noexcept { return calls_[static_cast<std::size_t>(r)]; }
  //! The rings' memory, kept between calls: the ring link's receive staging, the block rings' scratch.
  std::vector<std::byte>& staging() noexcept { return staging_; }
  std::vector<std::byte>& scratch() noexcept { return scratch_; }
  void set_interrupt(const std::atomic<bool>* flag) noexcept { interrupt_ = flag; }

  //! Starts collective `d`: checks this communicator is usable, exchanges the
  //! header with every other rank, and raises CollectiveMismatch on every
  //! rank if they disagree. `bytes` of `payload` (the direct algorithm's
  //! data) travel in the header's message when both fit in fused_max bytes,
  //! else as a second message that take_payloads() receives once the
  //! headers agree, so that no rank receives data of a size it did not expect.
  std::uint64_t enter(const CallDesc& d, const void* payload, std::size_t bytes) {
    if (!poisoned_.empty())
      throw CollectiveAborted("strata: " + d.str() + " on rank " + std::to_string(rank_) +
                              ": this communicator is unusable: " + poisoned_ + " (create a new one to continue)");
    const std::uint64_t seq = ++entered_;
    agreed_ = false;
    now_ = Activity{};
    cur_ = d;
    cur_seq_ = seq;
    deadline_ = std::chrono::steady_clock::now() + opts_.timeout;
    const auto me = static_cast<std::size_t>(rank_);
    calls_[me] = to_wire(seq, d);
    fused_ = sizeof(WireCall) + bytes <= fused_max;
    calls_[me].separate = (bytes && !fused_) ? 1 : 0;  // a separate payload message follows
    if (size_ == 1) {
      if (auto why = contract_violation(calls_, rank_); !why.empty()) throw CollectiveMismatch(why);
      return seq;
    }
    Pending& recvs = header_recvs_;  // reused: no allocation per call
    Pending& sends = header_sends_;
    const Pending::OnThrow cancel_recvs{recvs}, cancel_sends{sends};
    recvs.reqs.assign(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    sends.reqs.clear();
    for (int r = 0; r < size_; ++r)
      if (r != rank_) {
        auto& box = inbox_[static_cast<std::size_t>(r)];
        if (box.size() < fused_max) box.resize(fused_max);
        check(MPI_Irecv(box.data(), static_cast<int>(fused_max), MPI_BYTE, r, tag_call, comm_,
                        &recvs.reqs[static_cast<std::size_t>(r)]),
              "MPI_Irecv");
      }
    outbox_.resize(sizeof(WireCall) + (fused_ ? bytes : 0));
    std::memcpy(outbox_.data(), &calls_[me], sizeof(WireCall));
    if (fused_ && bytes) std::memcpy(outbox_.data() + sizeof(WireCall), payload, bytes);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) {
        sends.reqs.push_back(MPI_REQUEST_NULL);
        check(MPI_Isend(outbox_.data(), static_cast<int>(outbox_.size()), MPI_BYTE, r, tag_call, comm_,
                        &sends.reqs.back()),
              "MPI_Isend");
        if (!fused_)
          each_payload_block(bytes, t_.network, [&](std::size_t off, std::size_t len) {
            payload_sends_.reqs.push_back(MPI_REQUEST_NULL);
            check(MPI_Isend(static_cast<const std::byte*>(payload) + off, as_count(len, "all_reduce"), MPI_BYTE, r,
                            tag_data, comm_, &payload_sends_.reqs.back()),
                  "MPI_Isend");
          });
      }
    got_.assign(static_cast<std::size_t>(size_), 0);
    got_[me] = 1;
    int missing = size_ - 1;
    wait_until([&] {
      for (int r = 0; r < size_ && missing; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        if (got_[ur]) continue;
        int flag = 0;
        MPI_Status st;
        MPI_Test(&recvs.reqs[ur], &flag, &st);
        if (!flag) continue;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (static_cast<std::size_t>(count) < sizeof(WireCall))
          throw CollectiveError("strata: rank " + std::to_string(r) + " sent a malformed collective header (" +
                                std::to_string(count) + " bytes)");
        std::memcpy(&calls_[ur], inbox_[ur].data(), sizeof(WireCall));
        last_seen_[ur] = calls_[ur].seq;
        got_[ur] = 1;
        --missing;
      }
      return !missing && sends.test_all();
    }, [&] { return who_never_arrived(); });
    if (!all_same_plain_call(calls_, rank_)) {
      if (auto why = contract_violation(calls_, rank_); !why.empty()) {
        drain_payloads();
        agreed_failure();  // every rank saw the same headers: each raises it
        throw CollectiveMismatch(why);
      }
    }
    if (after_contract_hook) after_contract_hook(seq);
    return seq;
  }

  void done(std::uint64_t seq) noexcept { completed_ = seq; }  //!< the collective `seq` finished on this rank

  //! Starts a set-up step outside the numbered collectives (creating or
  //! splitting a communicator, agreeing on a run): its own deadline.
  void begin_setup(std::string_view what) {
    agreed_ = false;
    now_ = Activity{.kind = Activity::setup, .call = what};
    deadline_ = std::chrono::steady_clock::now() + opts_.timeout;
  }

  //! Waits for the non-blocking collective `req` (MPI_Iallreduce, MPI_Ibcast,
  //! ...) under the current call's deadline, abort notices and interrupt
  //! flag. `what` names the MPI call. A rank that stopped responding after
  //! the contract is named by the CollectiveTimeout; the request (and the
  //! staging and counts it may still use) is then abandoned, never reused.
  void wait_collective(MPI_Request& req, std::string_view what) {
    try {
      wait_until([&] {
        int flag = 0;
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        return flag != 0;
      }, [&] {
        return "rank(s) " + others() + " did not complete " + std::string(what) +
               " with this rank (stopped, hung or gone after the call began)";
      });
    } catch (...) {
      if (req != MPI_REQUEST_NULL) comm_.keep_forever(), abandon(req, staging_, counts_, displs_);
      throw;
    }
  }
  //! Before a blocking MPI call that only an agreement made safe
  //! (MPI_Comm_split after its all-gather): if this rank's deadline passed
  //! meanwhile (it was stopped, say), another rank may have given up on the
  //! agreement, so this one gives up too instead of blocking on it.
  void check_still_in_time(std::string_view what) {
    if (std::chrono::steady_clock::now() <= deadline_) return;
    poison(std::string(what) + " not entered after the deadline");
    throw CollectiveTimeout("strata: " + std::string(what) + " on rank " + std::to_string(rank_) + " of " +
                            std::to_string(size_) + ": the agreement before it completed after this rank's " +
                            std::to_string(opts_.timeout.count()) + " ms deadline; rank(s) " + others() +
                            " may have given up on it, so this rank does not enter the blocking call");
  }
  //! Scratch arrays of a non-blocking collective's counts and displacements
  //! (MPI reads them until it completes).
  std::vector<int>& counts() noexcept { return counts_; }
  std::vector<int>& displs() noexcept { return displs_; }

  //! Starts one point-to-point message: checks this communicator is usable
  //! and starts its deadline (point-to-point messages take no sequence number:
  //! they never meet the collectives' headers).
  void begin_message(const Activity& a) {
    agreed_ = false;
    now_ = a;
    if (!poisoned_.empty())
      throw CollectiveAborted("strata: " + activity() + " on rank " + std::to_string(rank_) +
                              ": this communicator is unusable: " + poisoned_ + " (create a new one to continue)");
    deadline_ = std::chrono::steady_clock::now() + opts_.timeout;
  }

  //! The direct algorithm's inputs, indexed by rank (ours is `mine`): in the
  //! header messages, or received now as separate messages of `bytes`.
  const void* const* take_payloads(const void* mine, std::size_t bytes) {
    ptrs_.assign(static_cast<std::size_t>(size_), nullptr);
    ptrs_[static_cast<std::size_t>(rank_)] = mine;
    if (size_ == 1) return ptrs_.data();
    if (fused_) {
      for (int r = 0; r < size_; ++r)
        if (r != rank_) ptrs_[static_cast<std::size_t>(r)] = inbox_[static_cast<std::size_t>(r)].data() + sizeof(WireCall);
      return ptrs_.data();
    }
    Pending recvs;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) {
        auto& box = inbox_[static_cast<std::size_t>(r)];
        if (box.size() < bytes) box.resize(bytes);
        ptrs_[static_cast<std::size_t>(r)] = box.data();
        each_payload_block(bytes, t_.network, [&](std::size_t off, std::size_t len) {
          recvs.reqs.push_back(MPI_REQUEST_NULL);
          check(MPI_Irecv(box.data() + off, static_cast<int>(len), MPI_BYTE, r, tag_data, comm_, &recvs.reqs.back()),
                "MPI_Irecv");
        });
      }
    wait_until([&] { return recvs.test_all() && payload_sends_.test_all(); },
               [&] { return std::string("the direct exchange's data did not arrive"); });
    payload_sends_.reqs.clear();
    return ptrs_.data();
  }

  //! Waits (poll_until) until `ready()` returns true. Meanwhile: another rank's
  //! abort notice raises CollectiveAborted with its reason, so does the interrupt
  //! flag; the deadline raises CollectiveTimeout with `missing()`. The communicator
  //! is then unusable, except after a timeout when `poison_on_timeout` is false
  //! (nothing was left half done). Every timeout marks the runtime failed
  //! (runtime.hpp): the exit then waits for the other ranks only within the timeout.
  template <class Ready, class Missing>
  void wait_until(Ready ready, Missing missing, bool poison_on_timeout = true) {
    std::optional<trace::Span> waiting;  // from the first look that finds the peers not there
    bool first = true;
    const auto look = [&] {
      if (ready()) return true;
      if (std::exchange(first, false) && trace::enabled())
        trace_wait(waiting.emplace("wait for peers", trace::Category::Wait), now_, cur_seq_);
      return false;
    };
    if (poll_until(deadline_, Pace::busy, look, [&] {
          check_abort_notice();
          if (interrupt_ && interrupt_->load(std::memory_order_relaxed)) {
            poison("abandoned because a replica of rank " + std::to_string(rank_) + " failed");
            throw CollectiveAborted("strata: " + activity() + " on rank " + std::to_string(rank_) +
                                    " abandoned: a local replica failed");
          }
        }))
      return;
    const std::string msg = "strata: " + activity() + " on rank " + std::to_string(rank_) + " of " +
                            std::to_string(size_) + " timed out after " + std::to_string(opts_.timeout.count()) +
                            " ms: " + missing();
    if (poison_on_timeout) poison(activity() + " timed out");
    // even a wait that leaves the communicator usable (a recv that took
    // nothing) gave up on a peer that may never come: the exit must not wait for it
    else failure_seen(opts_.timeout);
    throw CollectiveTimeout(msg);
  }

  //! Tells every other rank that this one failed (`why`), so that their calls
  //! on this communicator raise CollectiveAborted carrying it instead of
  //! waiting; this communicator is unusable afterwards. Bounded: returns
  //! within the timeout (at most 2 s) even if ranks are gone.
  void abort(const std::string& why) {
    if (remote_abort_) return;  // the failure came from another rank, which told everyone
    if (poisoned_.empty()) poison("rank " + std::to_string(rank_) + " aborted: " + why);
    if (abort_sent_) return;
    abort_sent_ = true;
    // never freed: a peer that frees its copy before taking the notice would
    // otherwise see it arrive on its next communicator given the same context
    comm_.keep_forever();
    send_abort_notice(comm_, rank_, size_, t_.token, why, opts_.timeout);
  }

  //! In its owner's destructor: if an exception thrown since this was made
  //! is unwinding the stack (outside any strata call), the other ranks are
  //! told unless they know of a failure already (abort, agreed_failure): their
  //! next call on it fails at once, naming this rank, not at its deadline.
  //! (An uncaught exception unwinds nothing: the terminate handler tells them.)
  void closing() noexcept {
    if (std::uncaught_exceptions() <= unwinding_at_birth_ || comm_ == MPI_COMM_NULL || !poisoned_.empty() || agreed_) return;
    try {
      abort("an exception thrown outside any collective unwound past its communicator (its strategy); its message "
            "is in that rank's output");
    } catch (...) {
    }
  }

  //! The error this rank is about to raise, every rank raises from the same
  //! data (a mismatch in the contract's headers, a run's fingerprint): its
  //! unwinding tells no one (closing), or a peer still finishing the
  //! collective would end with "rank N failed" instead of the mismatch.
  void agreed_failure() noexcept { agreed_ = true; }

  //! This communicator is unusable from now on, for `why`.
  void poison(std::string why) {
    if (poisoned_.empty()) poisoned_ = std::move(why);
    if (live_) live_->settle();  // an uncaught exception later need not tell the others
    failure_seen(opts_.timeout);
  }
  //! A failure seen while it lived keeps it (its owner's destructor calls this); whether it is never freed.
  void keep_if_failed() noexcept { if (live_ && live_->kept()) comm_.keep_forever(); }
  [[nodiscard]] bool never_freed() const noexcept { return comm_.kept() || (live_ && live_->kept()); }

  //! Header and payload travel as one message up to here (under eager limits).
  static constexpr std::size_t fused_max = 4096;

 private:
  //! What this rank is doing, for messages (activity.hpp).
  [[nodiscard]] std::string activity() const { return describe(now_, cur_seq_, cur_); }
  //! Every rank but this one ("1", "0, 2, 3").
  [[nodiscard]] std::string others() const { return all_ranks_but(rank_, size_); }
  [[nodiscard]] std::string who_never_arrived() const { return mpi::who_never_arrived(got_, last_seen_); }

  //! After a disagreement: take (and drop) the payloads other ranks sent
  //! separately and let ours be taken, so the communicator stays consistent.
  void drain_payloads() {
    // per rank: the bytes of payload it sent us separately, still to take
    std::vector<std::size_t> left(static_cast<std::size_t>(size_), 0);
    for (int r = 0; r < size_; ++r) {
      const auto& c = calls_[static_cast<std::size_t>(r)];
      if (r != rank_ && c.separate) left[static_cast<std::size_t>(r)] = c.in_count * dtype_bytes(c.dtype);
    }
    std::vector<std::byte> sink;
    wait_until([&] {
      bool pending = false;
      for (int r = 0; r < size_; ++r) pending = drop_arrived(comm_, r, tag_data, left[static_cast<std::size_t>(r)], sink) || pending;
      return payload_sends_.test_all() && !pending;
    }, [&] { return std::string("ranks did not take the data of a collective they disagreed on"); });
    payload_sends_.reqs.clear();
  }

  void check_abort_notice() {
    const std::optional<AbortNotice> n = take_abort_notice(comm_, t_.token);
    if (!n) return;
    remote_abort_ = true;
    poison("rank " + std::to_string(n->rank) + " failed: " + n->why);
    throw CollectiveAborted("strata: " + activity() + " on rank " + std::to_string(rank_) + " abandoned: rank " +
                            std::to_string(n->rank) + " failed: " + n->why);
  }

  CommHandle comm_;
  std::optional<ListedComm> live_;  // after comm_: off the list before the communicator is freed
  int rank_ = 0, size_ = 1;
  MpiOptions opts_;
  Transport t_;  // shared memory or network, and the token (transport.hpp)
  std::uint64_t entered_ = 0, completed_ = 0;
  std::vector<std::uint64_t> last_seen_;       // per rank: the last collective it arrived at with us
  std::vector<std::vector<std::byte>> inbox_;  // per rank: its header (+ payload) of this collective
  std::vector<WireCall> calls_;                // per rank: its call of this collective
  std::vector<std::byte> outbox_, staging_, scratch_;
  std::vector<int> counts_, displs_;
  bool fused_ = true;
  Pending payload_sends_;  // the direct algorithm's separate payload messages
  Pending header_recvs_, header_sends_;
  std::vector<char> got_;          // per rank: its header arrived
  std::vector<const void*> ptrs_;  // per rank: its direct payload
  std::string poisoned_;
  bool remote_abort_ = false, abort_sent_ = false;
  bool agreed_ = false;  // the last call ended in a failure every rank raises (agreed_failure)
  const std::atomic<bool>* interrupt_ = nullptr;
  Activity now_{};
  CallDesc cur_;
  std::uint64_t cur_seq_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  int unwinding_at_birth_ = std::uncaught_exceptions();  // exceptions in flight when it was made
};

}  // namespace strata::detail::mpi
