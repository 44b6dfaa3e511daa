#pragma once
//! The parameter server in one process: the servers are a ShardStore (each
//! shard's pushes and pulls serialized by its own lock, different shards
//! concurrently; a server's work runs on the thread that asks for it, as a
//! call instead of a message), the workers are the Coordinator's threads,
//! each running its steps itself. The Coordinator and its StalenessClock are
//! the same ones that schedule MPI worker ranks (ps/mpi.hpp); what this
//! transport adds is in their hooks: a completed synchronous round applied on
//! the store, a failed worker's staged gradients dropped from it.
//!   strata::InProcessParameterServers ps{{.workers = 4, .servers = 2, .staleness = 1}};

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <strata/ps/coordinator.hpp>
#include <strata/ps/runtime.hpp>
#include <strata/ps/shard_store.hpp>

namespace strata {

//! ParameterServerRuntime with servers and workers in this process (see the file comment).
class InProcessParameterServers final : public ParameterServerRuntime {
 public:
  explicit InProcessParameterServers(ParameterServerOptions o)
      : o_(check(std::move(o))),
        coord_(CoordinatorOptions{.workers = o_.workers,
                                  .staleness = o_.staleness,
                                  .timeout = o_.timeout,
                                  .max_attempts = o_.max_attempts,
                                  .max_queued = 0,
                                  .on_failure = o_.on_failure}) {
    coord_.on_worker_lost([this](int w) {
      if (store_) store_->drop_staged(w);
    });
  }

  InProcessParameterServers(const InProcessParameterServers&) = delete;
  InProcessParameterServers& operator=(const InProcessParameterServers&) = delete;
  //! The coordinator's end retires its workers, which completes a round;
  //! its hook must not apply what a run that ended in error left staged:
  //! the update belongs to a model that is gone by now (a 1 ms timeout
  //! crashed the examples here).
  ~InProcessParameterServers() override { forget_update(); }

  [[nodiscard]] Role role() const noexcept override { return Role::Chief; }
  [[nodiscard]] int num_workers() const noexcept override { return o_.workers; }
  [[nodiscard]] int num_servers() const noexcept override { return o_.servers; }
  [[nodiscard]] std::optional<std::uint64_t> staleness() const noexcept override { return o_.staleness; }
  [[nodiscard]] bool servers_in_process() const noexcept override { return true; }
  [[nodiscard]] const ParameterServerOptions& options() const noexcept { return o_; }
  [[nodiscard]] Coordinator& coordinator() noexcept { return coord_; }
  //! The servers' store (after create_variables).
  [[nodiscard]] const ShardStore<float>& store() const {
    if (!store_) throw Error("ParameterServerStrategy: no variables were created on the servers yet");
    return *store_;
  }

  void create_variables(const std::vector<Shape>& shapes, const Tensor<float>& init, ServerUpdate update) override {
    Tensor<float> flat = detail::flat_value(shapes, init);
    forget_update();  // no round of the old variables is applied to the new ones
    update_ = std::move(update);
    store_ = std::make_unique<ShardStore<float>>(std::move(flat), detail::shard_layout(shapes, o_.partitioner, o_.servers),
                                                 o_.servers);
    // synchronous rounds: what a round's workers staged is applied once
    // every live worker finished the round, before any starts the next
    if (o_.staleness == std::uint64_t{0}) {
      coord_.clock().on_round([this](std::uint64_t) {
        if (store_) store_->apply_staged(update_);
      });
    }
  }
  //! Clears the round hook (under the clock's lock: a round being applied
  //! finishes first); the servers' pushes run only inside steps, which the
  //! update's owner has joined by then.
  void forget_update() override { coord_.clock().on_round({}); }

  void pull(int, std::span<float> params) override {
    const ShardStore<float>& s = store();
    check_size(params.size(), "pull");
    for (std::size_t i = 0; i < s.num_shards(); ++i) {
      const Range r = s.elements(i);
      s.pull(i, params.subspan(r.begin, r.size()));
    }
  }
  void push(int w, std::span<const float> grad) override {
    check_size(grad.size(), "push");
    ShardStore<float>& s = *store_;
    const bool sync = o_.staleness == std::uint64_t{0};
    for (std::size_t i = 0; i < s.num_shards(); ++i) {
      const Range r = s.elements(i);
      if (sync) s.stage(i, w, grad.subspan(r.begin, r.size()));
      else s.push(i, grad.subspan(r.begin, r.size()), update_);
    }
  }
  void read(std::span<float> out) override { store().value(out); }
  void assign(std::span<const float> in) override {
    if (!store_) throw Error("ParameterServerStrategy: no variables were created on the servers yet");
    store_->assign(in);
  }

  void set_step(std::function<StepOutput(int, const StepInput&)> fn) override {
    std::lock_guard lk(mu_);
    step_ = std::make_shared<std::function<StepOutput(int, const StepInput&)>>(std::move(fn));
  }
  RemoteValue<StepOutput> schedule(StepInput in) override {
    std::shared_ptr<std::function<StepOutput(int, const StepInput&)>> fn;
    {
      std::lock_guard lk(mu_);
      fn = step_;
    }
    if (!fn) throw Error("ParameterServerStrategy::schedule: no step function was set");
    return coord_.schedule([this, fn, in = std::move(in)](WorkerContext& ctx) {
      if (o_.before_step) o_.before_step(ctx);
      return (*fn)(ctx.worker(), in);
    });
  }
  //! Errors as Coordinator::join; after one, also waits for the steps
  //! still running, whatever the timeout's size: they use the caller's model
  //! (the executor's worker copies and gradients), which an error frees
  //! next. In one process a step never waits (pull, compute, push), so this
  //! takes its computation; a bound far above it ends the process with a
  //! message rather than free memory in use.
  void join() override {
    try {
      coord_.join();
    } catch (...) {
      const auto limit = std::max<std::chrono::steady_clock::duration>(10 * o_.timeout, std::chrono::minutes(5));
      if (!coord_.wait_running(limit)) {
        std::fprintf(stderr,
                     "strata: the parameter-server run ended (%s), but a worker's step still runs after %lld s; "
                     "ending the process rather than free the model it uses\n",
                     detail::what_of(std::current_exception()).c_str(),
                     static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(limit).count()));
        std::fflush(stderr);
        std::abort();
      }
      throw;
    }
  }
  [[nodiscard]] std::vector<WorkerFailure> failures() const override { return coord_.failures(); }
  [[nodiscard]] std::vector<std::uint64_t> pushes_per_server() const override {
    std::vector<std::uint64_t> v;
    for (int s = 0; s < o_.servers; ++s) v.push_back(store_ ? store_->pushes(s) : 0);
    return v;
  }
  [[nodiscard]] std::vector<std::uint64_t> shard_versions() const override {
    std::vector<std::uint64_t> v;
    if (store_)
      for (std::size_t i = 0; i < store_->num_shards(); ++i) v.push_back(store_->version(i));
    return v;
  }
  void set_shard_versions(std::span<const std::uint64_t> v) override {
    if (!store_ || v.size() != store_->num_shards())
      throw Error("ParameterServerStrategy: " + std::to_string(v.size()) + " shard versions for " +
                  std::to_string(store_ ? store_->num_shards() : 0) + " shards");
    for (std::size_t i = 0; i < v.size(); ++i) store_->set_version(i, v[i]);
  }
  [[nodiscard]] std::vector<std::uint64_t> pulls_per_server() const override {
    std::vector<std::uint64_t> v;
    for (int s = 0; s < o_.servers; ++s) v.push_back(store_ ? store_->pulls(s) : 0);
    return v;
  }

 private:
  static ParameterServerOptions check(ParameterServerOptions o) {
    if (o.workers < 1) throw Error("ParameterServerStrategy: at least one worker, got " + std::to_string(o.workers));
    if (o.servers < 1) throw Error("ParameterServerStrategy: at least one server, got " + std::to_string(o.servers));
    return o;
  }
  void check_size(std::size_t got, const char* what) const {
    if (got != store().total_elements())
      throw ShapeError(std::string("ParameterServerStrategy::") + what + ": the variables hold " +
                       std::to_string(store().total_elements()) + " elements, the buffer " + std::to_string(got));
  }

  ParameterServerOptions o_;
  std::unique_ptr<ShardStore<float>> store_;  // declared before the coordinator: its threads use it
  ServerUpdate update_;
  std::mutex mu_;
  std::shared_ptr<std::function<StepOutput(int, const StepInput&)>> step_;
  Coordinator coord_;  // last: its worker threads stop before the rest goes
};

}  // namespace strata
