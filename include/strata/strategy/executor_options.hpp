#pragma once
//! What a strategy tells its executor (Strategy::executor_options(), set
//! before the model is made): whether the update is sharded over mirrored
//! replicas, the number format of GPU matrix products, where
//! CentralStorageStrategy keeps its variables on GPU replicas.
//!   s.executor_options().sharded_update = strata::ShardedUpdate::Off;

#include <cstddef>

#include <strata/strategy/device_compute.hpp>  // MatmulPrecision

namespace strata {

//! Whether a mirrored executor shards the optimizer update over replicas.
enum class ShardedUpdate {
  //! Sharded from 3 replicas in one process: measured faster there (the
  //! update alone 1.5x at 4 replicas, whole MLP steps 1.04-1.07x), slower at 2
  //! (0.91-0.96x: two collectives instead of one cost more than half the
  //! update saves; docs/performance.md).
  Auto,
  On,    //!< sharded wherever the replicas' collectives allow it (one process)
  Off,   //!< every replica updates its whole copy
};

//! Whether `local` replicas in one process shard their update under `mode`
//! (Auto: from 3 replicas); the executors add what else they need (collectives
//! that reduce-scatter and all-gather, one worker).
[[nodiscard]] constexpr bool shards_update(ShardedUpdate mode, std::size_t local) noexcept {
  return local > 1 && (mode == ShardedUpdate::On || (mode == ShardedUpdate::Auto && local >= 3));
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
  //! (strategy/captured_steps.hpp); the loss, metrics, bad labels and
  //! skipped steps read every `read_every` steps. Other placements refuse it.
  bool capture_steps = false;
  std::size_t read_every = 100;
  //! Gradient buckets (strategy/buckets.hpp; issue 25), CPU replicas of
  //! Mirrored and MultiWorkerMirrored: the gradient is cut into contiguous
  //! buckets of whole variables of at least this many bytes, in backward
  //! order, each all-reduced (non-blocking) as soon as backward has finished
  //! it, while backward goes on; the update waits for every bucket. 0: one
  //! flat all-reduce after backward. With the direct reduction (the default
  //! in one process) the weights are bitwise the flat run's. The flat
  //! reduction stays where a bucket would not help or cannot be: GPU
  //! replicas, the sharded update (Auto from 3 replicas: set ShardedUpdate::
  //! Off to bucket there), a custom loop's gradient hook.
  //!   s.executor_options().bucket_bytes = 4 << 20;   // before making the model
  std::size_t bucket_bytes = 0;
  friend bool operator==(const ExecutorOptions&, const ExecutorOptions&) = default;
};

}  // namespace strata
