#pragma once
//! The chief's rank over MPI: the shared Coordinator schedules its steps, one
//! Coordinator worker per worker rank. A Coordinator worker carries its step
//! to its rank (the batch out, the answer back, both bounded by the timeout);
//! everything else is the Coordinator's, as in one process: which idle
//! worker the staleness bound lets take the next step, a failure
//! rescheduled on another worker, a step given up after max_attempts, what
//! join() waits for. What is particular to MPI sits in the Coordinator's
//! hooks: a completed synchronous round (staleness 0) is applied on every
//! server, a failed worker's staged gradients are dropped there. A run (from
//! the first step scheduled to join) starts by assigning the chief's value,
//! optimizer state and shard versions to the servers and ends by reading
//! theirs back, so between runs the chief's copy is the truth (what a
//! checkpoint saves, what a restore sets before the next run).
//!   detail::MpiChief chief{link, spec, options, layout, value, state, versions};
//!   auto out = chief.schedule(std::move(batch));  chief.join();

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/ps/cluster_spec.hpp>
#include <strata/ps/coordinator.hpp>
#include <strata/ps/mpi/link.hpp>
#include <strata/ps/mpi/state_message.hpp>
#include <strata/ps/mpi/step_message.hpp>
#include <strata/ps/runtime.hpp>

namespace strata::detail {

//! The chief's scheduling over MPI (see the file comment). `layout`,
//! `value` (the chief's copy of every variable), `state` (the hook to the
//! chief's copy of the optimizer state) and `versions` (of every shard)
//! belong to the caller and are read at the start and written at the end of
//! each run.
class MpiChief {
 public:
  MpiChief(PsLink& link, const ClusterSpec& spec, const ParameterServerOptions& o, const ServerLayout& layout,
           Tensor<float>& value, const ServerState& state, std::vector<std::uint64_t>& versions)
      : link_(link), spec_(spec), layout_(layout), value_(value), state_(state), versions_(versions),
        coord_(std::make_unique<Coordinator>(CoordinatorOptions{.workers = static_cast<int>(spec.workers.size()),
                                                                .staleness = o.staleness,
                                                                .timeout = o.timeout,
                                                                .max_attempts = o.max_attempts,
                                                                .max_queued = 0,
                                                                .on_failure = on_failure(o, spec)})) {
    if (o.staleness == std::uint64_t{0}) {
      // a completed round is applied on every server before anyone starts the next
      coord_->clock().on_round([this](std::uint64_t) { tell_servers(kApply, std::vector<float>{}); });
      coord_->on_worker_lost([this](int w) { tell_servers(kDrop, std::vector<int>{w}); });
    }
  }
  MpiChief(const MpiChief&) = delete;
  MpiChief& operator=(const MpiChief&) = delete;
  ~MpiChief() {
    coord_->clock().on_round({});  // the servers may be gone: retiring the workers must not message them
    coord_.reset();                // its threads stop before the link goes
  }

  [[nodiscard]] Coordinator& coordinator() noexcept { return *coord_; }

  //! Hands `in` to the next idle worker rank the staleness bound lets start.
  RemoteValue<StepOutput> schedule(StepInput in) {
    {
      std::lock_guard lk(mu_);
      if (unreported_) std::rethrow_exception(std::exchange(unreported_, nullptr));
      if (!running_) {
        tell_servers(kAssign, std::vector<float>(value_.data(), value_.data() + value_.size()));  // the truth between runs
        send_state();                                                    // and its optimizer state
        running_ = true;
        run_error_.clear();
      }
    }
    // shared: a send that times out leaves the batch to MPI (send_step)
    return coord_->schedule([this, in = std::make_shared<const StepInput>(std::move(in))](WorkerContext& ctx) {
      return run_on_rank(ctx, in);
    });
  }
  //! Waits for every scheduled step; errors as Coordinator::join.
  void join() {
    if (auto e = finish_run(); e) std::rethrow_exception(e);
  }
  //! Ends the run, if one is under way, and tells every other rank that
  //! training is over, sending `final_value`. An error of the run is kept for
  //! the next join() or schedule().
  //! If the other ranks do not take the end within the timeout, the
  //! CollectiveTimeout names them, and the error that ended the run first,
  //! if one did (fit is unwinding from it: this error replaces it).
  void end_training(std::span<const float> final_value) {
    if (auto e = finish_run(); e) {
      std::lock_guard lk(mu_);
      if (!unreported_) unreported_ = e;
    }
    // on the heap: a send that times out keeps its buffer (MPI may still read it)
    auto v = std::make_shared<std::vector<float>>(final_value.begin(), final_value.end());
    PsLink::Requests reqs;
    reqs.keep.push_back(v);
    for (int r = 0; r < link_.size(); ++r)
      if (r != link_.rank()) link_.isend(reqs, v->data(), v->size(), r, kEnd);
    try {
      link_.wait_all(reqs, "the end of training to reach every rank");
    } catch (const CollectiveTimeout& e) {
      std::lock_guard lk(mu_);
      if (run_error_.empty()) throw;
      throw CollectiveTimeout(std::string(e.what()) + ", after the training run had ended in error: " + run_error_);
    }
  }

 private:
  static std::function<void(const WorkerFailure&)> on_failure(const ParameterServerOptions& o, const ClusterSpec& spec) {
    if (o.on_failure) return o.on_failure;
    return [workers = spec.workers](const WorkerFailure& f) {
      std::fprintf(stderr, "strata: worker %d (rank %d) failed step %llu (rescheduling it): %s\n", f.worker,
                   workers.at(static_cast<std::size_t>(f.worker)), static_cast<unsigned long long>(f.step),
                   f.what.c_str());
    };
  }

  //! The transport's part of a step: the batch to worker rank ctx.worker(),
  //! its answer back. A step that threw there throws here (the worker
  //! failed); a rank that does not answer is the transport's failure.
  StepOutput run_on_rank(WorkerContext& ctx, const std::shared_ptr<const StepInput>& in) {
    const int dst = spec_.workers.at(static_cast<std::size_t>(ctx.worker()));
    StepAnswer a;
    try {
      send_step(link_, dst, ctx, in);
      a = recv_answer(link_, dst, ctx.worker(), ctx.step());
    } catch (...) {
      throw TransportError(std::current_exception());
    }
    if (a.failed) throw Error(*a.failed);
    return std::move(a.out);
  }

  //! Waits for the run's steps; after a run that was not cut short, the
  //! servers' value becomes the chief's. Returns the run's error, if any.
  std::exception_ptr finish_run() {
    std::lock_guard lk(mu_);
    if (!running_) return std::exchange(unreported_, nullptr);
    running_ = false;
    const Coordinator::Outcome o = coord_->settle();
    const auto noted = [&](std::exception_ptr e) {
      if (e && run_error_.empty()) run_error_ = what_of(e);
      return e;
    };
    if (o.fatal) return noted(o.error);
    try {
      read_servers();
      read_state();
    } catch (...) {
      return noted(std::current_exception());
    }
    return noted(o.error);
  }

  //! The chief tells every server `data` under `tag` and waits for each one's ack.
  template <class T>
  void tell_servers(int tag, std::vector<T> data) {
    std::lock_guard lk(servers_mu_);  // one exchange at a time: each expects one ack per server
    // on the heap: a wait that times out leaves them to MPI (PsLink::wait_all)
    auto copy = std::make_shared<std::vector<T>>(std::move(data));
    auto acks = std::make_shared<std::vector<float>>(spec_.servers.size());
    PsLink::Requests reqs;
    reqs.keep = {copy, acks};
    for (std::size_t s = 0; s < spec_.servers.size(); ++s) link_.irecv(reqs, &(*acks)[s], 0, spec_.servers[s], kAck);
    for (const int server : spec_.servers) link_.isend(reqs, copy->data(), copy->size(), server, tag);
    link_.wait_all(reqs, "the servers' acknowledgement");
  }
  //! The servers' value becomes the chief's.
  void read_servers() {
    std::lock_guard lk(servers_mu_);
    auto kept = std::make_shared<std::vector<std::vector<float>>>(spec_.servers.size());  // see tell_servers
    auto& parts = *kept;
    PsLink::Requests reqs;
    reqs.keep.push_back(kept);
    for (std::size_t s = 0; s < parts.size(); ++s) {
      parts[s].resize(layout_.count_of(s));
      link_.irecv(reqs, parts[s].data(), parts[s].size(), spec_.servers[s], kReadReply);
    }
    for (const int server : spec_.servers) link_.isend_empty(reqs, server, kRead);
    link_.wait_all(reqs, "the servers' values at the end of a run");
    for (std::size_t s = 0; s < parts.size(); ++s) layout_.scatter(s, parts[s], value_.span());
  }

  //! Each server gets its shards' versions and their slices of the chief's
  //! optimizer state, and acknowledges.
  void send_state() {
    std::lock_guard lk(servers_mu_);
    check_versions();
    auto kept = std::make_shared<std::vector<std::vector<char>>>(spec_.servers.size());  // see tell_servers
    auto& bytes = *kept;
    auto acks = std::make_shared<std::vector<float>>(spec_.servers.size());
    PsLink::Requests reqs;
    reqs.keep = {kept, acks};
    for (std::size_t s = 0; s < spec_.servers.size(); ++s) {
      ServerStatePart part{{}, std::vector<float>(state_.slots * layout_.count_of(s))};
      for (std::size_t i : layout_.of(s)) part.versions.push_back(versions_[i]);
      if (!part.slots.empty()) state_.read(server_ranges(layout_, s), part.slots);
      bytes[s] = pack_state(part);
      link_.irecv(reqs, &(*acks)[s], 0, spec_.servers[s], kAck);
    }
    for (std::size_t s = 0; s < spec_.servers.size(); ++s)
      link_.isend(reqs, bytes[s].data(), bytes[s].size(), spec_.servers[s], kAssignState);
    link_.wait_all(reqs, "the servers' acknowledgement of the optimizer state");
  }
  //! The servers' optimizer state and versions become the chief's.
  void read_state() {
    std::lock_guard lk(servers_mu_);
    check_versions();
    auto kept = std::make_shared<std::vector<std::vector<char>>>(spec_.servers.size());  // see tell_servers
    auto& bytes = *kept;
    PsLink::Requests reqs;
    reqs.keep.push_back(kept);
    for (std::size_t s = 0; s < bytes.size(); ++s) {
      bytes[s].resize(state_bytes(layout_, s, state_.slots));
      link_.irecv(reqs, bytes[s].data(), bytes[s].size(), spec_.servers[s], kReadStateReply);
    }
    for (const int server : spec_.servers) link_.isend_empty(reqs, server, kReadState);
    link_.wait_all(reqs, "the servers' optimizer state at the end of a run");
    for (std::size_t s = 0; s < bytes.size(); ++s) {
      const auto part = unpack_state(bytes[s], layout_.of(s).size(), state_.slots * layout_.count_of(s),
                                     "server rank " + std::to_string(spec_.servers[s]) + "'s reply");
      std::size_t k = 0;
      for (std::size_t i : layout_.of(s)) versions_[i] = part.versions[k++];
      if (!part.slots.empty()) state_.write(server_ranges(layout_, s), part.slots);
    }
  }
  void check_versions() const {
    if (versions_.size() != layout_.shards().size())
      throw Error("ParameterServerStrategy: the chief holds " + std::to_string(versions_.size()) +
                  " shard versions for " + std::to_string(layout_.shards().size()) + " shards");
  }

  PsLink& link_;
  const ClusterSpec& spec_;
  const ServerLayout& layout_;
  Tensor<float>& value_;
  const ServerState& state_;
  std::vector<std::uint64_t>& versions_;
  std::mutex mu_;          // the run's state below, for the training loop's thread
  std::mutex servers_mu_;  // one exchange with the servers at a time
  std::exception_ptr unreported_;
  std::string run_error_;  // the error that ended the last run, for end_training's
  bool running_ = false;
  std::unique_ptr<Coordinator> coord_;  // last: its threads use everything above
};

}  // namespace strata::detail
