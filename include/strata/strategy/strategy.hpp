#pragma once
//! Strategy<Sync, Placement, Reduce>: a distribution strategy composed from
//! policies. It owns its replicas (persistent threads), runs a function on
//! each, reduces and gathers what they return, and makes variables placed
//! as its placement policy says. Invalid combinations fail to compile with
//! a sentence naming the fix.
//!   strata::MirroredStrategy s{strata::cpu_replicas(4)};
//!   auto losses = s.run([&](auto& ctx) { return step(ctx); });

#include <concepts>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/comm/threads/communicator.hpp>
#include <strata/policy/placement.hpp>
#include <strata/policy/reduce.hpp>
#include <strata/policy/sync.hpp>
#include <strata/comm/algorithm/native.hpp>
#include <strata/parallel/data/central_storage_executor.hpp>
#include <strata/parallel/data/mirrored_executor.hpp>
#include <strata/parallel/pipeline/pipeline_executor.hpp>
#include <strata/strategy/surface.hpp>
#include <strata/device/device.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/execution/replica_pool.hpp>
#include <strata/execution/variable.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace detail {
template <class Sync, class Placement, class Reduce>
consteval bool validate_composition() {
  if constexpr (std::same_as<Sync, Asynchronous> && std::same_as<Placement, ParameterServer> &&
                std::same_as<Reduce, PushPull>) {
    // the valid composition, reached only when its specialization is not visible
    static_assert(dependent_false<Placement>,
                  "strata: ParameterServerStrategy is an opt-in header: #include <strata/strategy/parameter_server.hpp>");
  } else if constexpr (std::same_as<Placement, ParameterServer>) {
    static_assert(dependent_false<Placement>,
                  "strata: ParameterServer placement is trained by workers pushing gradients as they go: use "
                  "strata::Asynchronous with strata::PushPull (ParameterServerStrategy; staleness 0 gives "
                  "synchronous rounds)");
  } else if constexpr (std::same_as<Sync, Asynchronous>) {
    static_assert(dependent_false<Placement>,
                  "strata: asynchronous training applies each worker's gradients as they arrive, which needs the "
                  "variables on parameter servers: use strata::ParameterServer placement with strata::PushPull "
                  "(ParameterServerStrategy)");
  } else if constexpr (std::same_as<Reduce, PushPull>) {
    static_assert(dependent_false<Placement>,
                  "strata: PushPull reduces through parameter servers: use it with strata::ParameterServer "
                  "placement and strata::Asynchronous (ParameterServerStrategy)");
  } else if constexpr (std::same_as<Placement, OneDevice>) {
    static_assert(std::same_as<Reduce, NoReduce>,
                  "strata: OneDevice placement runs a single replica, so there is nothing to reduce: "
                  "use strata::NoReduce, or Mirrored placement for several replicas");
  } else if constexpr (std::same_as<Placement, Mirrored>) {
    static_assert(!std::same_as<Reduce, NoReduce>,
                  "strata: Mirrored placement keeps a copy of each variable per replica and needs an all-reduce "
                  "to keep them identical: use strata::AutoReduce, strata::Ring or strata::Direct");
    static_assert(!std::same_as<Reduce, ReduceToOne>,
                  "strata: ReduceToOne reduces onto a single central copy, but Mirrored placement keeps a copy per "
                  "replica: use strata::AutoReduce, strata::Ring or strata::Direct, or CentralStorage placement");
    static_assert(!std::same_as<Reduce, Native>,
                  "strata: Native passes an all-reduce through to a backend library (MPI_Allreduce, NCCL), and "
                  "replicas in one process have none: use strata::AutoReduce, strata::Ring or strata::Direct "
                  "(MultiWorkerMirroredStrategy reaches MPI_Allreduce across processes)");
  } else if constexpr (std::same_as<Placement, Pipeline>) {
    static_assert(std::same_as<Reduce, NoReduce>,
                  "strata: Pipeline placement holds each layer's variables once, on the stage that runs it, so there "
                  "is nothing to reduce across stages: use strata::NoReduce (PipelineStrategy; data x pipeline "
                  "parallelism, which would reduce across pipelines, is not built yet)");
  } else if constexpr (std::same_as<Placement, CentralStorage>) {
    static_assert(std::same_as<Reduce, ReduceToOne>,
                  "strata: CentralStorage placement keeps one host copy of each variable, so gradients are reduced "
                  "onto it: use strata::ReduceToOne");
  }
  // Any other placement is accepted here; it still needs an executor
  // (parallel/dispatch.hpp; one's own: detail::ExecutorFor), whose absence is a sentence too.
  return true;
}

//! Runs fn(ctx) on every replica of `pool`, ctx made by make_context(r),
//! and gathers what they return as PerReplica<R> (nothing when void): the
//! body of every strategy's run.
template <class Context, class Make, class F>
auto run_replicas(ReplicaPool& pool, Make make_context, F& fn) {
  using R = std::invoke_result_t<F&, Context&>;
  if constexpr (std::is_void_v<R>) {
    pool.run([&](int r) {
      Context ctx = make_context(r);
      fn(ctx);
    });
  } else {
    std::vector<std::optional<R>> out(static_cast<std::size_t>(pool.size()));
    pool.run([&](int r) {
      Context ctx = make_context(r);
      out[static_cast<std::size_t>(r)].emplace(fn(ctx));
    });
    std::vector<R> values;
    values.reserve(out.size());
    for (auto& v : out) values.push_back(std::move(*v));
    return PerReplica<R>(std::move(values));
  }
}
}  // namespace detail

template <SyncPolicy Sync, PlacementPolicy Placement, ReducePolicy Reduce>
class Strategy : public detail::StrategySurface<Strategy<Sync, Placement, Reduce>> {
  static_assert(detail::validate_composition<Sync, Placement, Reduce>());

 public:
  using sync_policy = Sync;
  using placement_policy = Placement;
  using reduce_policy = Reduce;
  using context_type = ReplicaContext<detail::all_reduce_algorithm_t<Reduce>>;

  //! Replicas on `devices` (one thread each).
  explicit Strategy(std::vector<Device> devices = default_devices(), CommOptions opts = {})
      : Strategy(std::move(devices), opts, false) {}
  //! One replica on `device`.
  explicit Strategy(Device device, CommOptions opts = {}) : Strategy(std::vector<Device>{device}, opts, false) {}

  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  [[nodiscard]] int num_replicas_in_sync() const noexcept { return static_cast<int>(devices_.size()); }
  //! The replicas this process runs: all of them.
  [[nodiscard]] int num_local_replicas() const noexcept { return num_replicas_in_sync(); }
  [[nodiscard]] const std::vector<Device>& devices() const noexcept { return devices_; }
  [[nodiscard]] const CommOptions& options() const noexcept { return pool_.team().options(); }

  //! Runs `fn(ctx)` on every replica and returns what each returned, as
  //! PerReplica<R> (nothing when fn returns void). If fn throws on any
  //! replica, replicas blocked in collectives are released and run throws
  //! ReplicaError naming the replica and holding its exception.
  template <std::invocable<context_type&> F>
  auto run(F&& fn) {
    return detail::run_replicas<context_type>(
        pool_, [&](int r) { return context_type{ThreadCommunicator(pool_.team(), r)}; }, fn);
  }

  //! Reduces per-replica scalars or tensors to one value on the caller, in
  //! replica order (deterministic).
  template <ReduceOperation Op, Element T>
  T reduce(Op, const PerReplica<T>& v) const {
    detail::check_op<Op, T>();
    check_count(v.size(), "reduce");
    T acc = v[0];
    for (std::size_t r = 1; r < v.size(); ++r) acc = Op::combine(acc, v[r]);
    detail::finalize<Op>(&acc, 1, v.size());
    return acc;
  }
  template <ReduceOperation Op, Element T>
  Tensor<T> reduce(Op, const PerReplica<Tensor<T>>& v) const {
    detail::check_op<Op, T>();
    check_count(v.size(), "reduce");
    Tensor<T> acc = v[0];
    for (std::size_t r = 1; r < v.size(); ++r) {
      if (v[r].shape() != acc.shape())
        throw ShapeError("Strategy::reduce: replica " + std::to_string(r) + " returned shape " + v[r].shape().str() +
                         " but replica 0 returned " + acc.shape().str());
      detail::combine_into<Op>(acc.data(), v[r].data(), acc.size());
    }
    detail::finalize<Op>(acc.data(), acc.size(), v.size());
    return acc;
  }

  //! Concatenates per-replica values in replica order: scalars into a 1-D
  //! tensor of num_replicas elements, tensors along their first axis (the
  //! other extents must match; the first may differ, as a last partial
  //! batch does).
  template <Element T>
  Tensor<T> gather(const PerReplica<T>& v) const {
    check_count(v.size(), "gather");
    return Tensor<T>({v.size()}, v.values());
  }
  template <Element T>
  Tensor<T> gather(const PerReplica<Tensor<T>>& v) const {
    check_count(v.size(), "gather");
    const Shape& s0 = v[0].shape();
    if (s0.rank() == 0) throw ShapeError("Strategy::gather: replica 0 returned a scalar tensor; there is no axis 0");
    std::vector<std::size_t> dims = s0.dims();
    dims[0] = 0;
    for (std::size_t r = 0; r < v.size(); ++r) {
      const Shape& s = v[r].shape();
      if (s.rank() != s0.rank() || !std::equal(s.dims().begin() + 1, s.dims().end(), s0.dims().begin() + 1))
        throw ShapeError("Strategy::gather: replica " + std::to_string(r) + " returned shape " + s.str() +
                         ", which cannot be concatenated along axis 0 with replica 0's " + s0.str());
      dims[0] += s[0];
    }
    Tensor<T> out{Shape(dims)};
    T* o = out.data();
    for (const auto& t : v) o = std::copy_n(t.data(), t.size(), o);
    return out;
  }

  //! Pipeline placement: how models made in this strategy's scope are split
  //! and run (set before making them), and what their training measured.
  [[nodiscard]] PipelineOptions& pipeline_options() noexcept
    requires std::same_as<Placement, Pipeline>
  {
    return pipeline_.options;
  }
  [[nodiscard]] PipelineStats& pipeline_stats() noexcept
    requires std::same_as<Placement, Pipeline>
  {
    return pipeline_.stats;
  }

  //! A variable placed as the placement policy says, initialised to `init`.
  template <Element T>
  auto make_variable(const Tensor<T>& init) const {
    if constexpr (std::same_as<Placement, CentralStorage>)
      return CentralVariable<T>(init, num_replicas_in_sync());
    else
      return MirroredVariable<T>(init, num_replicas_in_sync());
  }

 protected:
  Strategy(std::vector<Device> devices, CommOptions opts, bool inline_single)
      : devices_(check_devices(std::move(devices))), pool_(static_cast<int>(devices_.size()), opts, inline_single) {}

 private:
  static std::vector<Device> default_devices() {
    if constexpr (std::same_as<Placement, OneDevice>) return {cpu(0)};
    else return cpu_replicas();
  }
  static std::vector<Device> check_devices(std::vector<Device> d) {
    if (d.empty()) throw Error("strata: a strategy needs at least one device, got none");
    if (std::same_as<Placement, OneDevice> && d.size() != 1)
      throw Error("strata: OneDeviceStrategy runs on exactly one device, got " + std::to_string(d.size()) +
                  "; use MirroredStrategy for several");
    if constexpr (placement_on_gpus(Placement::kind) || std::same_as<Placement, Pipeline>) {  // pipeline: GPU stages
      for (const Device& dev : d)  // GPU replicas, or CPU ones, not both (one device: trivially)
        if (dev.is_gpu() != d.front().is_gpu())
          throw Error("strata: " + d.front().str() + " and " + dev.str() +
                      ": a strategy's replicas are all GPUs or all CPUs");
    } else {
      for (const Device& dev : d)
        if (dev.is_gpu())
          throw Error("strata: " + dev.str() + ": replicas of this strategy run on CPUs only so far; GPUs train "
                      "under OneDeviceStrategy{strata::gpu(i)}, MirroredStrategy, CentralStorageStrategy and "
                      "PipelineStrategy ({strata::virtual_gpus(0, n)}, {strata::gpus({0, 1})})");
    }
    return d;
  }
  void check_count(std::size_t n, const char* what) const {
    if (n != devices_.size())
      throw ShapeError(std::string("Strategy::") + what + ": got " + std::to_string(n) + " values for " +
                       std::to_string(devices_.size()) + " replicas");
  }

  std::vector<Device> devices_;
  mutable detail::ReplicaPool pool_;
  struct PipelineState {
    PipelineOptions options;
    PipelineStats stats;
  };
  struct NoPipeline {};
  [[no_unique_address]] std::conditional_t<std::same_as<Placement, Pipeline>, PipelineState, NoPipeline> pipeline_;
};

//! Synchronous replicas in one process, variables mirrored, all-reduce
//! chosen by size. Deterministic.
using MirroredStrategy = Strategy<Synchronous, Mirrored, AutoReduce>;
//! Synchronous replicas computing, variables on the host in one copy.
using CentralStorageStrategy = Strategy<Synchronous, CentralStorage, ReduceToOne>;
//! One replica on one device.
using OneDeviceStrategy = Strategy<Synchronous, OneDevice, NoReduce>;
//! Model parallelism in one process: a model's layers split into one stage
//! per replica, micro-batches flowing through them (pipeline_options()).
using PipelineStrategy = Strategy<Synchronous, Pipeline, NoReduce>;

//! The strategy in force when none was chosen: one replica, run on the
//! caller's own thread.
class DefaultStrategy : public OneDeviceStrategy {
 public:
  DefaultStrategy() : OneDeviceStrategy({cpu(0)}, CommOptions{}, true) {}
  //! The default strategy on `device` when asked (e.g. DefaultStrategy{gpu(0)}).
  explicit DefaultStrategy(Device device) : OneDeviceStrategy({device}, CommOptions{}, true) {}
};

//! The process-wide default strategy.
inline DefaultStrategy& get_strategy() {
  static DefaultStrategy s;
  return s;
}

//! The strategy of the innermost scope on this thread, or the default one.
inline AnyStrategy& current_strategy() {
  if (auto s = current_scope(); s && s->strategy) return *s->strategy;
  return get_strategy().any();
}

}  // namespace strata
