#pragma once
//! BasicMultiWorkerReplicaContext's reduce-scatter and all-gather over every
//! replica of every worker: what ZeRO runs across workers
//! (parallel/zero/fully_sharded_executor.hpp, ShardLayout across workers).
//! Hierarchical, as the context's all-reduce: a reduce-scatter sums the
//! local replicas onto local replica 0, reduce-scatters between the
//! workers' leaders over the workers' communicator (worker w keeps block shard_range(n, W, w)) and
//! broadcasts the block locally; an all-gather joins locally, between the
//! leaders, then broadcasts. bf16/fp16 are summed in FP32, rounded once.
//! Queued on the replica's progress thread in issue order. Between two
//! workers every sum is a + b, so stages 2 and 3 give stage 0's bits.
//!   strata::Work w = ctx.reduce_scatter_async(unit_grad, my_slice, strata::Sum);  ...;  w.wait();

#include <algorithm>
#include <cstddef>
#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/progress.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/strategy/multi_worker_basic.hpp>

namespace strata {

template <WorkerCommunicator Comm>
template <class T, class F>
Work BasicMultiWorkerReplicaContext<Comm>::queued(const char* what, std::size_t n, F&& f) {
  return s_.async_[static_cast<std::size_t>(local_.rank())]->submit(
      detail::Described<T>{what, n}, [ctx = *this, f = std::forward<F>(f)]() mutable {
        try {
          f(ctx);
        } catch (const std::exception& e) {
          // as all_reduce_async: the other local replicas' waits end with this cause at once
          ctx.s_.pool_.team().abort(ctx.local_.rank(), e.what());
          throw;
        }
      });
}

template <WorkerCommunicator Comm>
template <WireElement T>
Work BasicMultiWorkerReplicaContext<Comm>::reduce_scatter_async(std::span<const T> in, std::span<T> out, SumOp) {
  return queued<T>("reduce_scatter", in.size(),
                   [in, out](BasicMultiWorkerReplicaContext& c) { c.template reduce_scatter_now<T>(in, out); });
}

template <WorkerCommunicator Comm>
Work BasicMultiWorkerReplicaContext<Comm>::all_gather_async(std::span<const float> in, std::span<float> out) {
  return queued<float>("all_gather", out.size(),
                       [in, out](BasicMultiWorkerReplicaContext& c) { c.all_gather_now(in, out); });
}

namespace detail {
//! This local replica's part of its worker's block of a unit of `n` (within the unit).
inline Range local_part(std::size_t n, std::size_t workers, std::size_t worker, std::size_t local, std::size_t rank) {
  const Range block = shard_range(n, workers, worker);
  const Range s = shard_range(block.size(), local, rank);
  return {block.begin + s.begin, block.begin + s.end};
}
}  // namespace detail

template <WorkerCommunicator Comm>
template <WireElement T>
void BasicMultiWorkerReplicaContext<Comm>::reduce_scatter_now(std::span<const T> in, std::span<T> out) {
  const auto W = static_cast<std::size_t>(s_.num_workers()), w = static_cast<std::size_t>(s_.worker_index());
  const auto L = static_cast<std::size_t>(local_.size()), l = static_cast<std::size_t>(local_.rank());
  const Range block = shard_range(in.size(), W, w);
  const Range mine = detail::local_part(in.size(), W, w, L, l);
  if (out.size() != mine.size())
    throw ShapeError("reduce_scatter over every worker's replicas: replica " + std::to_string(replica_id_in_sync_group()) +
                     "'s slice of " + std::to_string(in.size()) + " elements holds " + std::to_string(mine.size()) +
                     ", its output " + std::to_string(out.size()));
  if (L == 1) return s_.leader([&] { s_.comm_.reduce_scatter(in, out, Sum); });
  const bool lead = l == 0;
  std::vector<T> acc(lead ? in.size() : 0), part(block.size());
  local_.reduce_to_one(in, std::span<T>(acc), 0, Sum);
  if (lead) s_.leader([&] { s_.comm_.reduce_scatter(std::span<const T>(acc), std::span<T>(part), Sum); });
  local_.broadcast(std::span<T>(part), 0);
  std::copy_n(part.data() + (mine.begin - block.begin), mine.size(), out.data());
}

template <WorkerCommunicator Comm>
void BasicMultiWorkerReplicaContext<Comm>::all_gather_now(std::span<const float> in, std::span<float> out) {
  const auto W = static_cast<std::size_t>(s_.num_workers()), w = static_cast<std::size_t>(s_.worker_index());
  const auto L = static_cast<std::size_t>(local_.size()), l = static_cast<std::size_t>(local_.rank());
  const Range mine = detail::local_part(out.size(), W, w, L, l);
  if (in.size() != mine.size())
    throw ShapeError("all_gather over every worker's replicas: replica " + std::to_string(replica_id_in_sync_group()) +
                     "'s slice of " + std::to_string(out.size()) + " elements holds " + std::to_string(mine.size()) +
                     ", its input " + std::to_string(in.size()));
  if (L == 1) return s_.leader([&] { s_.comm_.all_gather(in, out); });
  std::vector<float> part(shard_range(out.size(), W, w).size());
  local_.all_gather(in, std::span<float>(part));  // the local slices in order: the worker's block
  if (l == 0) s_.leader([&] { s_.comm_.all_gather(std::span<const float>(part), out); });
  local_.broadcast(out, 0);
}

}  // namespace strata
