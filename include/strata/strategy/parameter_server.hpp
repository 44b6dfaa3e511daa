#pragma once
//! ParameterServerStrategy = Strategy<Asynchronous, ParameterServer, PushPull>:
//! variables sharded over parameter servers, workers that pull them, compute
//! gradients on their own batches and push them, servers that apply the
//! optimizer to each push as it arrives, and a coordinator scheduling steps
//! on workers (a failed worker's step is rescheduled on another). A staleness
//! bound k keeps every worker within k steps of the slowest (k = 0:
//! synchronous rounds). In one process the servers and workers are threads;
//! with the MPI backend they are ranks (strata/ps/mpi.hpp).
//!   strata::ParameterServerStrategy s{{.workers = 4, .servers = 2, .staleness = 1}};
//!   auto model = s.scope([] { return strata::nn::Sequential{...}; });
//!   model.fit(s.distribute(train.batch(128)), {.epochs = 5});   // each batch is one worker's step
//! Not deterministic unless staleness is 0 (then rounds sum in worker order).

#include <memory>
#include <utility>

#include <strata/ps/in_process.hpp>
#include <strata/ps/runtime.hpp>
#include <strata/parallel/ps/parameter_server_executor.hpp>
#include <strata/strategy/strategy.hpp>

namespace strata {

namespace detail {
//! The one replica of a chief running a function given to run (no collectives needed).
class SoloContext final : public AnyReplicaContext {
 public:
  int replica_id_in_sync_group() const noexcept override { return 0; }
  int num_replicas_in_sync() const noexcept override { return 1; }
  void all_reduce(std::span<float>, SumOp) override {}
  void all_reduce(std::span<double>, SumOp) override {}
  void reduce_to_one(std::span<const float> in, std::span<float> out, int, SumOp) override {
    if (in.size() != out.size())
      throw ShapeError("reduce_to_one: " + std::to_string(in.size()) + " elements into " + std::to_string(out.size()));
    std::copy(in.begin(), in.end(), out.begin());
  }
  void barrier() override {}
};
}  // namespace detail

template <>
class Strategy<Asynchronous, ParameterServer, PushPull>
    : public detail::StrategySurface<Strategy<Asynchronous, ParameterServer, PushPull>> {
 public:
  using sync_policy = Asynchronous;
  using placement_policy = ParameterServer;
  using reduce_policy = PushPull;

  //! Servers and workers as threads of this process.
  explicit Strategy(ParameterServerOptions o = {})
      : owned_(std::make_unique<InProcessParameterServers>(std::move(o))), rt_(owned_.get()) {}
  //! Over a runtime made elsewhere (the MPI transport), which must outlive the strategy.
  explicit Strategy(ParameterServerRuntime& rt) : rt_(&rt) {}
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  //! Replicas computing one step together: 1 (each step runs on one worker).
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return 1; }
  [[nodiscard]] int num_workers() const noexcept { return rt_->num_workers(); }
  [[nodiscard]] int num_servers() const noexcept { return rt_->num_servers(); }
  [[nodiscard]] std::optional<std::uint64_t> staleness() const noexcept { return rt_->staleness(); }
  [[nodiscard]] ParameterServerRuntime& runtime() noexcept { return *rt_; }
  [[nodiscard]] bool is_chief() const noexcept { return rt_->role() == ParameterServerRuntime::Role::Chief; }
  //! The chief is worker 0 (it prints); over MPI, servers and workers are 1.
  [[nodiscard]] int worker_index() const noexcept { return is_chief() ? 0 : 1; }

  //! Runs `fn(ctx)` once, on the caller's thread, as the chief's one replica
  //! (training steps go to the workers through fit or schedule).
  template <std::invocable<detail::SoloContext&> F>
  auto run(F&& fn) {
    detail::SoloContext ctx;
    using R = std::invoke_result_t<F&, detail::SoloContext&>;
    if constexpr (std::is_void_v<R>) fn(ctx);
    else return PerReplica<R>(std::vector<R>{fn(ctx)});
  }

  //! The in-process coordinator (for scheduling your own steps); throws over MPI.
  [[nodiscard]] Coordinator& coordinator() {
    if (!owned_) throw Error("ParameterServerStrategy::coordinator: steps over MPI are scheduled by models (fit)");
    return owned_->coordinator();
  }
  //! Shorthands for coordinator().schedule / join.
  template <class F>
  auto schedule(F&& fn) { return coordinator().schedule(std::forward<F>(fn)); }
  void join() { rt_->join(); }

  //! A variable sharded by the strategy's partitioner (ShardedVariable).
  template <Element T>
  [[nodiscard]] ShardedVariable<T> make_variable(const Tensor<T>& init) const {
    const auto& o = owned_ ? owned_->options() : ParameterServerOptions{};
    const auto layout = detail::shard_layout({init.shape()}, o.partitioner, rt_->num_servers());
    return ShardedVariable<T>(init, layout.size());
  }

 private:
  std::unique_ptr<InProcessParameterServers> owned_;
  ParameterServerRuntime* rt_;
};

//! Asynchronous training with variables on parameter servers (see above).
using ParameterServerStrategy = Strategy<Asynchronous, ParameterServer, PushPull>;

}  // namespace strata
