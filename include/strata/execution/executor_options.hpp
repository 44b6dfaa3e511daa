#pragma once
//! What a strategy tells its executor (Strategy::executor_options(), set
//! before the model is made): whether the update is sharded over mirrored
//! replicas, the number format of GPU matrix products, where
//! CentralStorageStrategy keeps its variables on GPU replicas.
//!   s.executor_options().sharded_update = strata::ShardedUpdate::Off;

#include <cstddef>
#include <optional>
#include <string>

#include <strata/device/device_compute.hpp>  // MatmulPrecision
#include <strata/gradient/compression_format.hpp>

namespace strata {

//! Whether a mirrored executor shards the optimizer update over replicas.
enum class ShardedUpdate {
  //! Sharded from 3 replicas in one process: measured faster there (the
  //! update alone 1.5x at 4 replicas, whole MLP steps 1.04-1.07x), slower at 2
  //! (0.91-0.96x: two collectives instead of one cost more than half the
  //! update saves; docs/performance.md).
  Auto,
  On,    //!< ZeRO stage 1: the optimizer state sharded over every replica (across workers too, where the replicas' collectives allow it)
  Off,   //!< ZeRO stage 0: every replica updates its whole copy
  //! ZeRO stage 2: the summed gradient sharded too (each bucket, or each
  //! layer, reduce-scattered as backward finishes it; a replica keeps its
  //! shard of the gradient and of the optimizer state).
  Gradients,
  //! ZeRO stage 3, fully sharded: the parameters too; a layer's are
  //! all-gathered before its forward and again before its backward, and
  //! freed after (parallel/zero/fully_sharded.hpp).
  Parameters,
};

//! The ZeRO stage a mode names (Auto: the stage it picks for `local` replicas).
[[nodiscard]] constexpr int zero_stage(ShardedUpdate mode, std::size_t local) noexcept {
  switch (mode) {
    case ShardedUpdate::Off: return 0;
    case ShardedUpdate::On: return local > 1 ? 1 : 0;
    case ShardedUpdate::Gradients: return local > 1 ? 2 : 0;
    case ShardedUpdate::Parameters: return local > 1 ? 3 : 0;
    case ShardedUpdate::Auto: break;
  }
  return local >= 3 ? 1 : 0;
}
//! The mode of ZeRO stage `stage` (0-3; the examples' --zero), else nullopt.
[[nodiscard]] constexpr std::optional<ShardedUpdate> sharded_update_for_stage(int stage) noexcept {
  constexpr ShardedUpdate modes[] = {ShardedUpdate::Off, ShardedUpdate::On, ShardedUpdate::Gradients,
                                     ShardedUpdate::Parameters};
  if (stage < 0 || stage > 3) return std::nullopt;
  return modes[stage];
}

//! Whether `local` replicas in one process shard their update under `mode`
//! (Auto: from 3 replicas); the executors add what else they need (collectives
//! that reduce-scatter and all-gather, one worker).
[[nodiscard]] constexpr bool shards_update(ShardedUpdate mode, std::size_t local) noexcept {
  return zero_stage(mode, local) >= 1;
}

//! Where CentralStorageStrategy keeps its one copy of the variables, and
//! runs the update, when its replicas are GPUs.
//!   s.executor_options().central_variables = strata::CentralVariables::Gpu;   // before making the model
enum class CentralVariables {
  //! Host memory (TensorFlow's choice with several GPUs): each replica's
  //! gradient downloaded and summed there, the value uploaded each step.
  Host,
  //! The GPU of replica 0 (TensorFlow's choice with one GPU; here also for
  //! virtual GPUs on it): the gradients summed on the devices, the update
  //! run once, with the one optimizer state, and its values broadcast to the
  //! other replicas' devices each step.
  Gpu,
};

//! What a strategy tells its executor.
struct ExecutorOptions {
  ShardedUpdate sharded_update = ShardedUpdate::Auto;
  //! CentralStorageStrategy on GPU replicas only.
  CentralVariables central_variables = CentralVariables::Host;
  //! The number format of a GPU replica's matrix products (values and
  //! optimizer state stay FP32; host products are always FP32).
  MatmulPrecision matmul = MatmulPrecision::FP32;
  //! OneDeviceStrategy on a GPU: each training step captured once per batch
  //! size (a CUDA graph) and replayed, nothing of it taken from the host
  //! (execution/captured_steps.hpp); the loss, metrics, bad labels and
  //! skipped steps read every `read_every` steps. Other placements refuse it.
  bool capture_steps = false;
  std::size_t read_every = 100;
  //! Gradient buckets (gradient/buckets.hpp; issue 25), CPU and GPU replicas
  //! of Mirrored and MultiWorkerMirrored: the gradient is cut into contiguous
  //! buckets of whole variables of at least this many bytes (the first, of
  //! the last layers, closed at min(this, 1 MiB), as DDP's), in backward
  //! order, each all-reduced (non-blocking) as soon as backward has finished
  //! it, while backward goes on; the update waits for every bucket. 0: one
  //! flat all-reduce after backward. With the direct reduction (the default
  //! in one process) the weights are bitwise the flat run's. The flat
  //! reduction stays where a bucket would not help or cannot be: the
  //! sharded update (Auto from 3 replicas: set ShardedUpdate::Off to bucket
  //! there), central variables, a custom loop's gradient hook. At ZeRO 2 and
  //! 3 the layers' reduce-scatters go by buckets of whole layers, and stage
  //! 2's gathers of the updated slices too (parallel/zero/shard_buckets.hpp; not
  //! with compression). Tensor parallelism buckets its copies' sum across
  //! workers (in one process: after backward).
  //!   s.executor_options().bucket_bytes = 4 << 20;   // before making the model
  std::size_t bucket_bytes = 0;
  //! Gradient compression (Compression); None: FP32 on the wire.
  Compression compression = Compression::None;
  //! Bytes of model state (values, gradient, optimizer state; compression's
  //! residual) one mirrored CPU replica, or GPU replica at ZeRO 2 and 3, may
  //! hold at its ZeRO stage (parallel/zero/fully_sharded.hpp's formula); 0: no
  //! limit. Checked when the variables are placed: a model too big for it
  //! fails at once, naming the stage that would fit.
  std::size_t memory_budget_bytes = 0;
  //! Tensor parallelism (parallel/tensor/tensor_parallel_executor.hpp), MirroredStrategy
  //! in one process: each copy of the model split over this many replicas
  //! (its attention heads and MLP pairs), replicas / this many copies; 1: off.
  //!   s.executor_options().tensor_parallel = 2;   // before making the model
  std::size_t tensor_parallel = 1;
  friend bool operator==(const ExecutorOptions&, const ExecutorOptions&) = default;
};

//! The bucket size ZeRO 2 and 3 group their layers' reduce-scatters (and
//! gathers) by under `o` (parallel/zero/shard_buckets.hpp): bucket_bytes, but 0
//! with compression, whose 16-bit windows are a layer's (each layer alone).
[[nodiscard]] inline std::size_t shard_bucket_bytes(const ExecutorOptions& o) noexcept {
  return o.compression == Compression::None ? o.bucket_bytes : 0;
}

//! What `o` does to the gradient of `local` CPU replicas per worker over
//! `workers` workers, in words (the examples' summary), by the mirrored
//! executors' rules: Auto is ZeRO 1 in one process from 3 replicas, else 0;
//! stages 1-3 asked for shard over every worker's
//! replicas; buckets at stages 0, 2 and 3.
//!   std::puts(strata::describe_gradient(s.executor_options(), 4, 1).c_str());
inline std::string describe_gradient(const ExecutorOptions& o, std::size_t local, int workers) {
  const bool automatic = o.sharded_update == ShardedUpdate::Auto, across = workers > 1;
  int stage = zero_stage(o.sharded_update, automatic ? local : local * static_cast<std::size_t>(across ? workers : 1));
  if (stage == 1 && automatic && across) stage = 0;
  static constexpr const char* sharded[] = {"every replica holds the whole model",
                                            "the optimizer state sharded over the replicas",
                                            "gradient and optimizer state sharded over the replicas",
                                            "values, gradient and optimizer state sharded over the replicas"};
  std::string out = sharded[stage];
  if (stage >= 1 && across) out += " of every worker";
  out += " (ZeRO " + std::to_string(stage) + ")";
  if (automatic) out += " (the default at " + std::to_string(local) + (local == 1 ? " replica)" : " replicas)");
  if (const std::size_t b = shard_bucket_bytes(o); stage >= 2 && b)
    out += "; the layers' gradients reduce-scattered by buckets of " + std::to_string((b + 1023) >> 10) +
           " KiB as backward ends them";
  else if (stage >= 2) out += "; each layer's gradient reduce-scattered as backward ends it";
  else if (stage == 1) out += "; one reduce-scatter after backward";
  else if (o.bucket_bytes)
    out += "; buckets of " + std::to_string((o.bucket_bytes + 1023) >> 10) + " KiB all-reduced as backward ends them";
  else out += "; one all-reduce after backward";
  if (o.compression != Compression::None)
    out += o.compression == Compression::BF16 ? "; bf16 on the wire (error feedback)" : "; fp16 on the wire (error feedback)";
  return out;
}

}  // namespace strata
