#pragma once
//! The sharded update (ZeRO stage 1) over the logical parameters, across
//! workers and for replicas that each hold the model in a layout of their
//! own (the mirrored executor's replicas of several workers, tensor
//! parallelism's members: mirrored_executor.hpp, tensor_parallel_executor.hpp): every
//! replica of the job owns one contiguous slice of the logical vector,
//! the slices in replica order covering it (across workers: worker w's
//! block shard_range(n, W, w), cut among its L replicas, the layout of the
//! replica contexts' reduce-scatter and all-gather over every worker's
//! replicas); it keeps the optimizer state of its slice only and updates
//! it. A step: each replica puts its part of the gradient at its place in
//! a logical vector (zeros elsewhere), the vectors are reduce-scattered
//! (each owner gets its slice of the sum), each updates its slice of the
//! values, and the slices are all-gathered into a logical vector every
//! replica takes its part from.
//!   const Range mine = strata::detail::logical_slice(n, W, w, L, l);
//!   strata::detail::slices_reduce(ctx, logical_grad, my_grad);  ...;  slices_gather(ctx, my_values, logical);

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

//! Local replica l's slice of n logical elements, of `workers` workers
//! (this one `worker`, with `local` replicas): shard_range(n, p, l) in one process.
[[nodiscard]] inline Range logical_slice(std::size_t n, std::size_t workers, std::size_t worker, std::size_t local,
                                         std::size_t l) {
  const Range block = shard_range(n, workers, worker);
  const Range s = shard_range(block.size(), local, l);
  return {block.begin + s.begin, block.begin + s.end};
}

//! Whether a replica context `Ctx` reduce-scatters and all-gathers over
//! every replica of the job (now, or without waiting).
template <class Ctx>
concept SlicingContext = requires(Ctx& c, std::span<const float> in, std::span<float> out) {
  c.reduce_scatter(in, out, Sum);
  c.all_gather(in, out);
} || requires(Ctx& c, std::span<const float> in, std::span<float> out) {
  { c.reduce_scatter_async(in, out, Sum) } -> std::same_as<Work>;
  { c.all_gather_async(in, out) } -> std::same_as<Work>;
};

//! `out` (this replica's slice) = its slice of the sum of every replica's `in` (logical); float, or
//! bf16/fp16 (compressed: compression.hpp) where the context takes them.
template <SlicingContext Ctx, class T = float>
void slices_reduce(Ctx& ctx, std::span<const T> in, std::span<T> out) {
  if constexpr (requires { ctx.reduce_scatter(in, out, Sum); }) {
    ctx.reduce_scatter(in, out, Sum);
  } else {  // the wait is this thread's exposed communication (the collective's own span is on the progress thread)
    Work w = ctx.reduce_scatter_async(in, out, Sum);
    trace::Span span{"sharded gradient", trace::Category::Wait, {{"bytes", in.size_bytes()}}};
    w.wait();
  }
}
//! `out` (logical) = every replica's slice `in`, in replica order.
template <SlicingContext Ctx>
void slices_gather(Ctx& ctx, std::span<const float> in, std::span<float> out) {
  if constexpr (requires { ctx.all_gather(in, out); }) {
    ctx.all_gather(in, out);
  } else {
    Work w = ctx.all_gather_async(in, out);
    trace::Span span{"sharded values", trace::Category::Wait, {{"bytes", out.size_bytes()}}};
    w.wait();
  }
}

//! A replica context's reduce-scatter and all-gather over every replica,
//! as sharded_update (fully_sharded.hpp) calls them.
template <SlicingContext Ctx>
struct SliceCollectives {
  Ctx& ctx;
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, SumOp) {
    slices_reduce(ctx, in, out);
  }
  void all_gather(std::span<const float> in, std::span<float> out) { slices_gather(ctx, in, out); }
};

//! The first call of a read of sharded state across workers (every worker
//! holding only its shards): one no other collective of a run makes (three
//! int64s summed), so that a worker elsewhere (the chief alone saving while
//! the others train on) fails the contract on every worker, naming both
//! calls and `collective` (the sentence saying the read is collective),
//! instead of its gathers meeting other gathers; and every worker holds
//! `slots` slots of `elements` in all (else an Error).
template <class Comm>
void agree_on_state_read(Comm& comm, const char* collective, std::size_t slots, std::size_t elements) {
  const std::int64_t agree[3] = {0x5a45524f /* "ZERO" */, static_cast<std::int64_t>(slots),
                                 static_cast<std::int64_t>(elements)};
  std::int64_t sum[3] = {agree[0], agree[1], agree[2]};
  try {
    comm.all_reduce(std::span<std::int64_t>(sum), Sum);
  } catch (const CollectiveMismatch& e) {
    throw CollectiveMismatch(std::string(collective) + e.what());
  }
  const auto W = static_cast<std::int64_t>(comm.size());
  if (sum[0] != W * agree[0] || sum[1] != W * agree[1] || sum[2] != W * agree[2])
    throw Error("reading the sharded state across workers: the workers hold different optimizer slots (this one " +
                std::to_string(slots) + "): compile the model alike on every worker");
}

//! join_logical_slices across workers (collective).
template <class Comm>
std::vector<Tensor<float>> join_across(Comm& comm, std::size_t n, std::size_t k, std::span<const Range> slices,
                                       const std::vector<std::vector<Tensor<float>>>& mine) {
  std::vector<Tensor<float>> out;
  agree_on_state_read(comm,
                      "reading the sharded optimizer state (each worker holds its slices only) is collective: call "
                      "save_checkpoint on every worker together, the chief alone writes; ",
                      k, n);
  const Range block = shard_range(n, static_cast<std::size_t>(comm.size()), static_cast<std::size_t>(comm.rank()));
  std::vector<float> send(block.size());
  for (std::size_t s = 0; s < k; ++s) {
    for (std::size_t l = 0; l < slices.size(); ++l)
      std::copy_n(mine[l][s].data(), slices[l].size(), send.data() + (slices[l].begin - block.begin));
    Tensor<float>& whole = out.emplace_back(Shape{n});
    comm.all_gather(std::span<const float>(send), whole.span());
  }
  return out;
}

//! join_logical_slices' communicator in one process: none.
struct NoWorkers {};

//! The workers' communicator of strategy `s` across workers, else null.
template <class S>
auto* workers_comm(S& s) {
  if constexpr (requires { s.communicator(); s.num_workers(); }) return s.num_workers() > 1 ? &s.communicator() : nullptr;
  else return static_cast<NoWorkers*>(nullptr);
}

//! Whole optimizer slots of n elements from the local replicas' slices
//! (`part(l)`: local replica l's slots, each its slice `slices[l]`, which
//! together cover this worker's block). Across workers (`comm`: the
//! workers' communicator, whose all_gather joins blocks shard_range(n, W, w))
//! collective: every worker calls it, and a worker elsewhere (the chief
//! alone saving) fails the check every worker makes first.
template <class Comm, class Part>
std::vector<Tensor<float>> join_logical_slices(Comm* comm, std::size_t n, std::span<const Range> slices, Part&& part) {
  std::vector<std::vector<Tensor<float>>> mine;
  for (std::size_t l = 0; l < slices.size(); ++l) mine.push_back(part(l));
  const std::size_t k = mine.empty() ? 0 : mine.front().size();
  if constexpr (!std::is_same_v<Comm, NoWorkers>)
    if (comm && comm->size() > 1) return join_across(*comm, n, k, slices, mine);
  std::vector<Tensor<float>> out;  // one process: the slices cover the whole
  for (std::size_t s = 0; s < k; ++s) {
    Tensor<float>& whole = out.emplace_back(Shape{n});
    for (std::size_t l = 0; l < slices.size(); ++l)
      std::copy_n(mine[l][s].data(), slices[l].size(), whole.data() + slices[l].begin);
  }
  return out;
}

}  // namespace strata::detail
