#pragma once
//! How n elements are split among p parts: the rule shared by reduce-scatter,
//! the direct algorithm and the ring, so that shards always agree.

#include <cstddef>

namespace strata {

//! A half-open range of element indices [begin, end).
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] constexpr std::size_t size() const noexcept { return end - begin; }
  friend constexpr bool operator==(Range, Range) = default;
};

//! Part `i` of `n` elements split into `parts` balanced parts: sizes differ by
//! at most one, the first `n % parts` parts are the longer ones.
//!   auto r = strata::shard_range(10, 4, 1);   // {3, 6}
constexpr Range shard_range(std::size_t n, std::size_t parts, std::size_t i) noexcept {
  const std::size_t base = n / parts;
  const std::size_t extra = n % parts;
  const std::size_t begin = i * base + (i < extra ? i : extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

namespace detail {
//! Like shard_range, but every boundary is a multiple of `granule` elements
//! (a cache line) so that parts written by different threads never share a
//! line. Trailing parts may be empty when n is small.
constexpr Range aligned_range(std::size_t n, std::size_t parts, std::size_t i,
                              std::size_t granule) noexcept {
  const std::size_t units = (n + granule - 1) / granule;
  const Range u = shard_range(units, parts, i);
  const std::size_t b = u.begin * granule < n ? u.begin * granule : n;
  const std::size_t e = u.end * granule < n ? u.end * granule : n;
  return {b, e};
}
}  // namespace detail

}  // namespace strata
