#pragma once
//! The one place that picks a strategy's executor: from its placement
//! (OneDevice, Mirrored, CentralStorage, Pipeline, ParameterServer), its
//! ExecutorOptions, its devices, and whether it spans workers; and that
//! refuses, in one sentence each, the combinations that do not exist.
//! Across workers the chosen executor is wrapped in MultiWorkerExecutor
//! (the run fingerprint agreed at fit's start). A placement of one's own
//! gets its executor from detail::ExecutorFor (execution/executor.hpp).
//!   std::unique_ptr<strata::Executor> ex = strata::detail::make_executor(strategy, program);
//! (Users reach it through strategy.any().make_executor(program).)

#include <concepts>
#include <memory>
#include <string>
#include <utility>

#include <strata/core/error.hpp>
#include <strata/execution/device_executor.hpp>
#include <strata/execution/executor.hpp>
#include <strata/execution/executor_options.hpp>
#include <strata/parallel/data/central_storage_executor.hpp>
#include <strata/parallel/data/mirrored_executor.hpp>
#include <strata/parallel/pipeline/pipeline_executor.hpp>
#include <strata/parallel/pipeline/pipeline_threads.hpp>
#include <strata/parallel/tensor/tensor_parallel_executor.hpp>
#include <strata/parallel/zero/fully_sharded_executor.hpp>
#include <strata/policy/placement.hpp>

namespace strata::detail {

//! A strategy whose replicas span processes (MultiWorkerMirroredStrategy,
//! MultiWorkerPipelineStrategy): it says so with `across_workers`.
template <class S>
concept AcrossWorkers = requires { requires S::across_workers; };

// Defined beside the types they make, in headers a program includes only
// with the strategy that needs them (the MPI ones, the parameter server's).
template <class S>
std::unique_ptr<Executor> make_parameter_server_executor(S& s, ModelProgram& program);  // parallel/ps/
template <class S>
std::unique_ptr<Executor> make_pipeline_on_ranks(S& s, ModelProgram& program);  // parallel/pipeline/pipeline_ranks.hpp
template <class S>
std::unique_ptr<Executor> across_workers(S& s, std::unique_ptr<Executor> inner,
                                         ModelProgram& program);  // parallel/data/multi_worker_executor.hpp

//! Throws the sentence for an option this strategy's placement does not take.
template <class S>
void refuse_unsupported_options(S& s) {
  using P = typename S::placement_policy;
  if constexpr (requires { s.executor_options().capture_steps; s.devices(); }) {
    if (s.executor_options().capture_steps && !(std::same_as<P, OneDevice> && s.devices().front().is_gpu()))
      throw Error("ExecutorOptions::capture_steps: captured steps run under OneDeviceStrategy on a GPU "
                  "(strata::gpu(i)); this strategy runs its replicas' steps eagerly: leave capture_steps off");
  }
  if constexpr (requires { s.executor_options().compression; }) {
    // what only the mirrored executors read: said, not ignored, elsewhere
    constexpr bool mirrored = std::same_as<P, Mirrored>;
    constexpr bool pipeline = std::same_as<P, Pipeline>;
    const ExecutorOptions& o = s.executor_options();
    if (o.compression != Compression::None && !mirrored && !pipeline)
      throw Error("ExecutorOptions::compression: the gradient is sent in 16 bits by the mirrored strategies' "
                  "all-reduce (MirroredStrategy, MultiWorkerMirroredStrategy) and a pipeline's copies' sum; this "
                  "strategy does not reduce it that way: leave compression at None");
    if (o.tensor_parallel != 1 && pipeline)
      throw Error("ExecutorOptions::tensor_parallel: a pipeline's stages are split by its own option, "
                  "PipelineOptions::tensor_parallel (s.pipeline_options().tensor_parallel = T, D x S x T replicas); "
                  "leave ExecutorOptions::tensor_parallel at 1");
    if (o.tensor_parallel != 1 && !mirrored)
      throw Error("ExecutorOptions::tensor_parallel: tensor parallelism splits the model over MirroredStrategy's "
                  "replicas (or a pipeline's stages: PipelineOptions::tensor_parallel); this strategy places its "
                  "variables otherwise: leave tensor_parallel at 1");
    if ((o.sharded_update == ShardedUpdate::Gradients || o.sharded_update == ShardedUpdate::Parameters) && !mirrored)
      throw Error("ExecutorOptions::sharded_update: ZeRO stages 2 and 3 shard MirroredStrategy's replicas; this "
                  "strategy places its variables otherwise: leave sharded_update at Auto, On or Off");
  }
}

//! Mirrored replicas: tensor parallelism (tensor_parallel > 1), else ZeRO 2
//! or 3 (sharded_update Gradients or Parameters), else the mirrored
//! executor (ZeRO 1, buckets and compression inside it).
template <class S>
std::unique_ptr<Executor> mirrored_executor(S& s, ModelProgram& program) {
  const ExecutorOptions& o = s.executor_options();
  if (o.tensor_parallel != 1) {
    check_tensor_options(o, SlicingContext<typename S::context_type>);
    if constexpr (requires(tensor_link_t<typename S::context_type>& c, std::span<float> x) {
                    c.send(x, 0, 0);
                    c.recv(x, 0, 0);
                  })
      return std::make_unique<TensorParallelExecutor<S>>(s, program, o);
    else
      throw Error("ExecutorOptions::tensor_parallel: this strategy's replicas have no send / recv to sum a "
                  "split layer's parts over; leave tensor_parallel at 1");
  }
  // over every replica of every worker: ZeRO 2 and 3 shard the whole job's state
  const int stage = zero_stage(o.sharded_update, static_cast<std::size_t>(s.num_replicas_in_sync()));
  if (stage >= 2) {
    // GPU replicas in one process shard through the device collectives; others (and GPU replicas across
    // workers, staged through host memory) through their replica contexts
    const bool device_collectives = s.devices().front().is_gpu() && sharding_groups(s).size() == 1;
    if (!device_collectives && !ShardingContext<typename S::context_type>)
      throw Error("ZeRO stage " + std::to_string(stage) + " (ShardedUpdate::" +
                  (stage == 2 ? "Gradients" : "Parameters") + ") is not available here: its replica contexts "
                  "cannot all-gather and reduce-scatter over every replica without waiting; use ShardedUpdate::Off");
    return std::make_unique<FullyShardedExecutor<S>>(s, program, o, stage);
  }
  return std::make_unique<MirroredExecutor<S>>(s, program, o);
}

//! The executor of strategy `s` for `program` (see the file's comment).
template <class S>
std::unique_ptr<Executor> make_executor(S& s, ModelProgram& program) {
  using P = typename S::placement_policy;
  refuse_unsupported_options(s);
  if constexpr (std::same_as<P, OneDevice>) {
    // on a GPU everything stays in its memory, on the caller's thread; on a CPU, a mirrored replica
    const Device& d = s.devices().front();
    if (d.is_gpu())
      return std::make_unique<DeviceExecutor>(program, make_compute(d, s.executor_options().matmul),
                                              s.executor_options());
    return mirrored_executor(s, program);
  } else if constexpr (std::same_as<P, Mirrored> && AcrossWorkers<S>) {
    return across_workers(s, mirrored_executor(s, program), program);
  } else if constexpr (std::same_as<P, Mirrored>) {
    return mirrored_executor(s, program);
  } else if constexpr (std::same_as<P, CentralStorage>) {
    // GPU replicas with the variables on a GPU (CentralVariables::Gpu): the mirrored executor's central mode
    if (s.devices().front().is_gpu() && s.executor_options().central_variables == CentralVariables::Gpu)
      return std::make_unique<MirroredExecutor<S>>(s, program, s.executor_options(), /*central=*/true);
    return std::make_unique<CentralStorageExecutor<S>>(s, program);
  } else if constexpr (std::same_as<P, Pipeline> && AcrossWorkers<S>) {
    return across_workers(s, make_pipeline_on_ranks(s, program), program);
  } else if constexpr (std::same_as<P, Pipeline>) {
    return std::make_unique<PipelineExecutor<ThreadStages<S>>>(ThreadStages<S>{s}, program, s.pipeline_options(),
                                                               s.pipeline_stats(), s.executor_options());
  } else if constexpr (std::same_as<P, ParameterServer>) {
    return make_parameter_server_executor(s, program);
  } else {
    return ExecutorFor<P>::make(s, program);  // a placement of one's own
  }
}

}  // namespace strata::detail
