#pragma once
//! What ZeRO stages 2 and 3 shard over (fully_sharded_executor.hpp): the
//! replica contexts that all-gather and reduce-scatter without waiting, the
//! replicas of each worker, the layers as shard units, and one replica's
//! started gathers and reduce-scatters (its context's, a GPU replica's
//! staged through host memory, or the device collectives').
//!   ShardingCalls<Ctx> c{ctx, colls, gpu_compute, r};  strata::Work w = c.scatter(unit_grad, my_slice);

#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/device/device_collectives.hpp>
#include <strata/execution/program.hpp>

namespace strata::detail {

//! Whether a replica context `Ctx` starts all-gathers and reduce-scatters without waiting.
template <class Ctx>
concept ShardingContext = requires(Ctx& c, std::span<const float> in, std::span<float> out) {
  { c.all_gather_async(in, out) } -> std::same_as<Work>;
  { c.reduce_scatter_async(in, out, Sum) } -> std::same_as<Work>;
};

//! The replicas of each worker of `s` (one process: one worker).
template <class S>
std::vector<std::size_t> sharding_groups(S& s) {
  if constexpr (requires { s.local_replicas_of(0); }) {
    std::vector<std::size_t> g;
    for (int w = 0; w < s.num_workers(); ++w) g.push_back(static_cast<std::size_t>(s.local_replicas_of(w)));
    return g;
  } else {
    return {static_cast<std::size_t>(s.num_local_replicas())};
  }
}

//! The unit sizes of a program's shard layout: each layer's parameters.
inline std::vector<std::size_t> shard_units(const ModelProgram& program) {
  try {
    return program.layer_param_counts();
  } catch (const Error&) {
    throw Error("sharded gradients or parameters (ZeRO 2 and 3) bind a model's layers one by one, and this model "
                "program describes no layers: use ShardedUpdate::On (ZeRO 1) or Off");
  }
}

//! Replica r's gather and reduce-scatter, started: over its context (CPU replicas; GPU replicas
//! across workers staged through host memory) or the device collectives (GPU replicas in one
//! process: the layout's slices are theirs).
template <class Ctx>
struct ShardingCalls {
  Ctx& ctx;
  DeviceCollectives* colls;
  kernels::Compute* c;
  int me;
  //! f(the collectives over every replica): the replica context, or for a GPU replica (across
  //! workers) that context on host copies of its buffers (StagedContext).
  template <class F>
  Work on_context(F&& f) {
    if constexpr (ShardingContext<Ctx>) {
      if (!c) return f(ctx);
      StagedContext<Ctx> staged{ctx, *c};
      return f(staged);
    } else {
      throw Error("ZeRO stages 2 and 3 need replica contexts that all-gather and reduce-scatter without "
                  "waiting");
    }
  }
  Work gather(std::span<const float> in, std::span<float> out) {
    if (colls) return colls->all_gather_async(me, *c, in.data(), out.data(), out.size());
    return on_context([&](auto& x) { return x.all_gather_async(in, out); });
  }
  Work scatter(std::span<const float> in, std::span<float> out) {
    if (colls) return colls->reduce_scatter_sum_async(me, *c, in.data(), out.data(), in.size());
    return on_context([&](auto& x) { return x.reduce_scatter_async(in, out, Sum); });
  }
};

}  // namespace strata::detail
