#pragma once
//! The ring all-reduce, written once over an abstract link: reduce-scatter
//! (p-1 steps) then all-gather (p-1 steps), over segments of p chunks so that
//! each step moves one chunk; and the reduce-scatter and the all-gather alone
//! over contiguous blocks (ring_reduce_scatter_blocks, ring_all_gather_blocks:
//! MPI's reduce-scatter and all-gather of large messages, comm/mpi/collective_work.hpp). Each backend supplies a link whose `step`
//! obtains the left neighbour's chunk (shared memory reads it in place, MPI
//! receives it) and combines it into ours.
//!   strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Ring> s{strata::cpu_replicas(4)};
//! Deterministic: every chunk is reduced in a fixed order, so the result is
//! bitwise identical run to run and on every replica; the order differs
//! from chunk to chunk (each chunk starts at a different replica), so it may
//! differ in the last bits from the direct algorithm's.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <string_view>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>

namespace strata {

//! Reduce policy and algorithm tag: the ring.
struct Ring {
  using reduce_policy = Ring;
  static constexpr std::string_view name = "ring";
};

namespace detail {

//! What a backend provides to run the ring: its position, and one step that
//! (a) makes our `send` range available to the right neighbour and (b)
//! combines the left neighbour's `recv` range into ours with `fn(dst, src, n)`
//! (any callable of that signature).
template <class L, class T>
concept RingLink = requires(L& link, std::size_t step, Range r, void (*fn)(T*, const T*, std::size_t)) {
  { link.rank() } -> std::convertible_to<int>;
  { link.size() } -> std::convertible_to<int>;
  link.step(step, r, r, fn);
};

template <ReduceOperation Op, class T>
void ring_reduce_fn(T* dst, const T* src, std::size_t n) noexcept {
  combine_into<Op>(dst, src, n);
}
template <class T>
void ring_copy_fn(T* dst, const T* src, std::size_t n) noexcept {
  std::copy_n(src, n, dst);
}
//! The last reduce-scatter step completes a chunk: it must be final (MEAN
//! divided) before the step is published, since the neighbour copies it next.
template <ReduceOperation Op, class T>
struct RingReduceFinal {
  std::size_t p;
  void operator()(T* dst, const T* src, std::size_t n) const noexcept {
    combine_into<Op>(dst, src, n);
    finalize<Op>(dst, n, p);
  }
};

//! Number of steps the ring takes for n elements: the links' sequence
//! numbers advance by this much.
inline std::size_t ring_steps(std::size_t n, std::size_t p, std::size_t chunk_elems) noexcept {
  if (p < 2 || n == 0) return 0;
  const std::size_t seg = chunk_elems * p;
  return ((n + seg - 1) / seg) * 2 * (p - 1);
}

//! All-reduce of `data` (n elements) in place over the ring formed by the links.
template <ReduceOperation Op, class T, RingLink<T> Link>
void ring_all_reduce(Link& link, T* data, std::size_t n, std::size_t chunk_elems) {
  const std::size_t p = static_cast<std::size_t>(link.size());
  const std::size_t r = static_cast<std::size_t>(link.rank());
  if (p == 1) {
    finalize<Op>(data, n, 1);
    return;
  }
  constexpr std::size_t granule = 64 / sizeof(T);
  chunk_elems = std::max(granule, chunk_elems / granule * granule);
  const std::size_t seg = chunk_elems * p;
  std::size_t step = 0;
  for (std::size_t off = 0; off < n; off += seg) {
    const std::size_t m = std::min(seg, n - off);
    auto chunk = [&](std::size_t i) {
      const Range c = aligned_range(m, p, i % p, granule);
      return Range{off + c.begin, off + c.end};
    };
    for (std::size_t k = 0; k + 2 < p; ++k)
      link.step(step++, chunk(r + p - k), chunk(r + 2 * p - k - 1), &ring_reduce_fn<Op, T>);
    link.step(step++, chunk(r + 2), chunk(r + 1), RingReduceFinal<Op, T>{p});
    for (std::size_t j = 0; j + 1 < p; ++j)
      link.step(step++, chunk(r + 1 + p - j), chunk(r + p - j), &ring_copy_fn<T>);
  }
}

//! Reduce-scatter over the ring in contiguous blocks: block b of `data`
//! (`block(b)`, a Range; the blocks in rank order, any sizes) ends reduced
//! on rank b, in place; the other blocks hold partial sums after. p - 1
//! steps: at step k rank r sends block r - k - 1 (what it has summed so
//! far) to the right and adds the left neighbour's block r - k - 2 into its
//! own; so block b is summed starting at rank b + 1, in ring order, ending
//! at b (between two ranks: a + b). `final_fn` combines the last step (the
//! Mean's division). Deterministic, as the ring all-reduce.
template <ReduceOperation Op, class T, RingLink<T> Link, class Block>
void ring_reduce_scatter_blocks(Link& link, Block&& block) {
  const std::size_t p = static_cast<std::size_t>(link.size());
  const std::size_t r = static_cast<std::size_t>(link.rank());
  for (std::size_t k = 0; k + 1 < p; ++k) {
    const Range send = block((r + 2 * p - k - 1) % p), recv = block((r + 2 * p - k - 2) % p);
    if (k + 2 < p) link.step(k, send, recv, &ring_reduce_fn<Op, T>);
    else link.step(k, send, recv, RingReduceFinal<Op, T>{p});
  }
}
//! All-gather over the ring in contiguous blocks: rank r's block (block(r))
//! in place in `data`, every block everywhere after p - 1 steps (at step k
//! rank r passes block r - k on and takes block r - k - 1 from the left).
template <class T, RingLink<T> Link, class Block>
void ring_all_gather_blocks(Link& link, Block&& block) {
  const std::size_t p = static_cast<std::size_t>(link.size());
  const std::size_t r = static_cast<std::size_t>(link.rank());
  for (std::size_t k = 0; k + 1 < p; ++k)
    link.step(k, block((r + p - k) % p), block((r + 2 * p - k - 1) % p), &ring_copy_fn<T>);
}

}  // namespace detail
}  // namespace strata
