#pragma once
//! A strategy seen without its type: what model code (strata/nn) needs to
//! train under any strategy without being a template over it, as
//! `tf.distribute.get_strategy()` returns a base class. Every Strategy<...>
//! offers one through `any()`; a strategy scope records it.
//!   strata::AnyStrategy& s = strata::current_strategy();
//!   s.run([&](strata::AnyReplicaContext& ctx) { ctx.all_reduce(grad, strata::Sum); });

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/policy/placement.hpp>
#include <strata/policy/sync.hpp>
#include <strata/execution/executor.hpp>
#include <strata/parallel/dispatch.hpp>
#include <strata/execution/executor_options.hpp>
#include <strata/parallel/pipeline/pipeline_options.hpp>

namespace strata {

//! The collectives of one replica, type-erased. Sums only: that is what
//! gradient aggregation needs; the typed ReplicaContext offers the rest.
class AnyReplicaContext {
 public:
  virtual ~AnyReplicaContext() = default;
  [[nodiscard]] virtual int replica_id_in_sync_group() const noexcept = 0;
  [[nodiscard]] virtual int num_replicas_in_sync() const noexcept = 0;
  //! This replica's index among the replicas of its own process (equal to
  //! replica_id_in_sync_group() except across workers).
  [[nodiscard]] virtual int local_replica_id() const noexcept { return replica_id_in_sync_group(); }
  //! In-place sum over the replicas with the strategy's all-reduce algorithm.
  virtual void all_reduce(std::span<float> data, SumOp) = 0;
  virtual void all_reduce(std::span<double> data, SumOp) = 0;
  //! Sum of every replica's `in` into `out` on `root` (others' `out` is untouched).
  virtual void reduce_to_one(std::span<const float> in, std::span<float> out, int root, SumOp) = 0;
  virtual void barrier() = 0;
};

//! A strategy, type-erased: what a model holds.
class AnyStrategy {
 public:
  virtual ~AnyStrategy() = default;
  [[nodiscard]] virtual PlacementKind placement() const noexcept = 0;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  [[nodiscard]] virtual int num_replicas_in_sync() const noexcept = 0;
  //! Runs `fn` on every replica of this process; errors as Strategy::run (ReplicaError).
  virtual void run(const std::function<void(AnyReplicaContext&)>& fn) = 0;
  //! The executor that trains `program` under this strategy (see
  //! execution/executor.hpp); it keeps references to both.
  [[nodiscard]] virtual std::unique_ptr<Executor> make_executor(ModelProgram& program) = 0;
  //! The processes of a synchronous multi-worker job (1 otherwise), and
  //! this one's index (0 is the chief, the one that prints).
  [[nodiscard]] virtual int num_workers() const noexcept { return 1; }
  [[nodiscard]] virtual int worker_index() const noexcept { return 0; }
  //! Whether every copy of a model's optimizer is in this process: false for
  //! parameter servers in other processes (a learning rate set at run time
  //! reaches only the copies in this process).
  [[nodiscard]] virtual bool optimizers_in_process() const noexcept { return true; }
  //! What runs where, in words, as a model's summary names it: "4 replicas",
  //! "2 workers, 1 server", "3 stages", "2 workers, 4 replicas".
  [[nodiscard]] virtual std::string layout() const { return count_of(num_replicas_in_sync(), "replica"); }

 protected:
  //! "1 replica", "2 replicas".
  static std::string count_of(long long n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  }
};

namespace detail {
template <class Ctx>
class ErasedReplicaContext final : public AnyReplicaContext {
 public:
  explicit ErasedReplicaContext(Ctx& ctx) : ctx_(ctx) {}
  int replica_id_in_sync_group() const noexcept override { return ctx_.replica_id_in_sync_group(); }
  int num_replicas_in_sync() const noexcept override { return ctx_.num_replicas_in_sync(); }
  int local_replica_id() const noexcept override {
    if constexpr (requires { ctx_.local_replica_id(); }) return ctx_.local_replica_id();
    else return ctx_.replica_id_in_sync_group();
  }
  void all_reduce(std::span<float> d, SumOp op) override { ctx_.all_reduce(d, op); }
  void all_reduce(std::span<double> d, SumOp op) override { ctx_.all_reduce(d, op); }
  void reduce_to_one(std::span<const float> in, std::span<float> out, int root, SumOp op) override {
    ctx_.reduce_to_one(in, out, root, op);
  }
  void barrier() override { ctx_.barrier(); }

 private:
  Ctx& ctx_;
};

//! A strategy's name: its own `name` where it has one, else its placement's.
template <class S>
constexpr std::string_view strategy_name() noexcept {
  if constexpr (requires { S::name; }) return S::name;
  else return S::placement_policy::name;
}

//! The options of strategy `S` an executor reads when a model is made in its
//! scope (executor_options(), pipeline_options()), as they were then.
struct NoOptions {
  friend bool operator==(NoOptions, NoOptions) = default;
};
template <class S>
struct MadeOptions {
  static constexpr bool has_exec = requires(S& s) { s.executor_options(); };
  static constexpr bool has_pipeline = requires(S& s) { s.pipeline_options(); };
  [[no_unique_address]] std::conditional_t<has_exec, ExecutorOptions, NoOptions> exec{};
  [[no_unique_address]] std::conditional_t<has_pipeline, PipelineOptions, NoOptions> pipeline{};
  explicit MadeOptions(S& s) {
    if constexpr (has_exec) exec = s.executor_options();
    if constexpr (has_pipeline) pipeline = s.pipeline_options();
  }
  friend bool operator==(const MadeOptions&, const MadeOptions&) = default;
};

//! The fields of `now` that differ from `then` ("stages, micro_batches").
//! The names of the fields that differ, "a, b", in the order they are looked at.
struct ChangedFields {
  std::string out;
  void operator()(bool differs, const char* name) {
    if (!differs) return;
    if (!out.empty()) out += ", ";
    out += name;
  }
};
inline std::string changed_fields(const PipelineOptions& then, const PipelineOptions& now) {
  ChangedFields add;
  add(then.stages != now.stages, "stages");
  add(then.micro_batches != now.micro_batches, "micro_batches");
  add(then.schedule != now.schedule, "schedule");
  add(then.memory_budget_bytes != now.memory_budget_bytes, "memory_budget_bytes");
  add(then.balance != now.balance, "balance");
  add(then.profile_steps != now.profile_steps, "profile_steps");
  add(then.data_parallel != now.data_parallel, "data_parallel");
  add(then.tensor_parallel != now.tensor_parallel, "tensor_parallel");
  return add.out;
}
inline std::string changed_fields(const ExecutorOptions& then, const ExecutorOptions& now) {
  ChangedFields add;
  add(then.sharded_update != now.sharded_update, "sharded_update");
  add(then.central_variables != now.central_variables, "central_variables");
  add(then.matmul != now.matmul, "matmul");
  add(then.capture_steps != now.capture_steps, "capture_steps");
  add(then.read_every != now.read_every, "read_every");
  add(then.bucket_bytes != now.bucket_bytes, "bucket_bytes");
  add(then.compression != now.compression, "compression");
  add(then.memory_budget_bytes != now.memory_budget_bytes, "memory_budget_bytes");
  add(then.tensor_parallel != now.tensor_parallel, "tensor_parallel");
  return add.out;
}

//! A model's executor, checking before each use that the strategy's options
//! are still those it was made with: an executor reads them once, when the
//! model is made in scope(), so a change after that would be ignored in
//! silence (an invalid stage split raising nothing). Any change raises an
//! Error naming the call order instead. Every other call goes straight to
//! the strategy's executor.
template <class S>
class OptionsChecked final : public ForwardingExecutor {
 public:
  OptionsChecked(S& s, std::unique_ptr<Executor> inner)
      : ForwardingExecutor(std::move(inner)), s_(s), made_(s) {}

  void place(const Tensor<float>& init) override { check(), inner_->place(init); }
  PassTotals run_pass(Pass& pass) override { return check(), inner_->run_pass(pass); }
  bool begin_fit(Pass& pass) override { return check(), inner_->begin_fit(pass); }

 private:
  void check() const {
    const MadeOptions<S> now(s_);
    if (now == made_) return;
    std::string call, fields;
    if constexpr (MadeOptions<S>::has_pipeline)
      if (now.pipeline != made_.pipeline) call = "pipeline_options()", fields = changed_fields(made_.pipeline, now.pipeline);
    if constexpr (MadeOptions<S>::has_exec)
      if (call.empty()) call = "executor_options()", fields = changed_fields(made_.exec, now.exec);
    throw Error("strata: " + call + " changed (" + fields + ") after a model was made in scope(); a model reads its "
                "strategy's options when it is made, so this one would run with the earlier ones: set " + call +
                " before making the model (or make a new model in scope() to use the new options)");
  }

  S& s_;
  MadeOptions<S> made_;
};

template <class S>
class ErasedStrategy final : public AnyStrategy {
 public:
  explicit ErasedStrategy(S& s) : s_(s) {}
  PlacementKind placement() const noexcept override { return S::placement_policy::kind; }
  std::string_view name() const noexcept override { return strategy_name<S>(); }
  int num_replicas_in_sync() const noexcept override { return s_.num_replicas_in_sync(); }
  void run(const std::function<void(AnyReplicaContext&)>& fn) override {
    s_.run([&](auto& ctx) {
      ErasedReplicaContext<std::remove_reference_t<decltype(ctx)>> erased(ctx);
      fn(erased);
    });
  }
  std::unique_ptr<Executor> make_executor(ModelProgram& program) override {
    return std::make_unique<OptionsChecked<S>>(s_, detail::make_executor(s_, program));
  }
  //! The synchronous peers: a parameter server's workers are not (they answer to its chief).
  int num_workers() const noexcept override {
    if constexpr (std::same_as<typename S::sync_policy, Synchronous>) return s_.num_workers();
    else return 1;
  }
  int worker_index() const noexcept override { return s_.worker_index(); }
  bool optimizers_in_process() const noexcept override {
    if constexpr (requires { s_.runtime().servers_in_process(); }) return s_.runtime().servers_in_process();
    else return true;
  }
  std::string layout() const override {
    if constexpr (requires { s_.num_servers(); }) {  // a parameter server's workers and servers
      return count_of(s_.num_workers(), "worker") + ", " + count_of(s_.num_servers(), "server");
    } else if constexpr (requires { s_.pipeline_options(); }) {  // stages, and copies of the pipeline
      const auto& o = s_.pipeline_options();
      const std::size_t d = o.data_parallel ? o.data_parallel : 1, t = o.tensor_parallel ? o.tensor_parallel : 1;
      const auto stages = static_cast<long long>(static_cast<std::size_t>(s_.num_replicas_in_sync()) / (d * t));
      return count_of(stages, "stage") + (t > 1 ? " split over " + std::to_string(t) + " replicas each" : std::string()) +
             (d > 1 ? " x " + std::to_string(d) + " copies" : std::string());
    } else if (s_.num_workers() > 1) {
      return count_of(s_.num_workers(), "worker") + ", " + count_of(s_.num_replicas_in_sync(), "replica");
    } else {
      return count_of(s_.num_replicas_in_sync(), "replica");
    }
  }

 private:
  S& s_;
};
}  // namespace detail

}  // namespace strata
