#pragma once
//! The ring all-reduce, written once over an abstract link: reduce-scatter
//! (p-1 steps) then all-gather (p-1 steps), over segments of p chunks so that
//! each step moves one chunk. Each backend supplies a link whose `step`
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

}  // namespace detail
}  // namespace strata
