#pragma once
//! Partitioners: how many shards a variable is split into along its first
//! axis, as TensorFlow's tf.distribute.experimental.partitioners decide
//! (the parameter server strategy places one shard per server in turn).
//!   strata::MinSizePartitioner p{.min_shard_bytes = 256 << 10, .max_shards = 4};
//!   std::size_t n = p(strata::Shape{784, 128}, sizeof(float));   // 1: 401 KB holds one 256 KiB shard
//! Shard i holds rows shard_range(rows, n, i): sizes differ by at most one
//! row, the first shards are the longer ones.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/tensor/shape.hpp>

namespace strata {

namespace detail {
//! Rows along axis 0 (a scalar is one row) and bytes per row.
inline std::size_t rows_of(const Shape& s) noexcept { return s.rank() == 0 ? 1 : s[0]; }
inline std::size_t row_bytes(const Shape& s, std::size_t elem_bytes) noexcept {
  const std::size_t rows = rows_of(s);
  return rows ? s.elements() / rows * elem_bytes : 0;
}
}  // namespace detail

//! Exactly `num_shards` shards (fewer when the variable has fewer rows).
struct FixedShardsPartitioner {
  std::size_t num_shards = 1;
  [[nodiscard]] std::size_t operator()(const Shape& shape, std::size_t /*elem_bytes*/) const {
    if (num_shards == 0) throw Error("FixedShardsPartitioner: num_shards must be at least 1, got 0");
    return std::max<std::size_t>(1, std::min(num_shards, detail::rows_of(shape)));
  }
};

//! As many shards as possible (at most `max_shards`, at most one per row)
//! while each keeps at least `min_shard_bytes`.
struct MinSizePartitioner {
  std::size_t min_shard_bytes = std::size_t{256} << 10;
  std::size_t max_shards = 1;
  [[nodiscard]] std::size_t operator()(const Shape& shape, std::size_t elem_bytes) const {
    if (min_shard_bytes == 0) throw Error("MinSizePartitioner: min_shard_bytes must be at least 1, got 0");
    if (max_shards == 0) throw Error("MinSizePartitioner: max_shards must be at least 1, got 0");
    const std::size_t bytes = shape.elements() * elem_bytes;
    return std::max<std::size_t>(1, std::min({max_shards, detail::rows_of(shape), bytes / min_shard_bytes}));
  }
};

//! As few shards as possible while each stays within `max_shard_bytes` (a
//! row is never split, so a row larger than that is a shard of its own);
//! `max_shards` (0: no limit) caps the count and wins over the size.
struct MaxSizePartitioner {
  std::size_t max_shard_bytes = 0;
  std::size_t max_shards = 0;
  [[nodiscard]] std::size_t operator()(const Shape& shape, std::size_t elem_bytes) const {
    if (max_shard_bytes == 0) throw Error("MaxSizePartitioner: max_shard_bytes must be at least 1, got 0");
    const std::size_t rows = detail::rows_of(shape), per_row = detail::row_bytes(shape, elem_bytes);
    if (rows == 0 || per_row == 0) return 1;
    const std::size_t rows_per_shard = std::max<std::size_t>(1, max_shard_bytes / per_row);
    std::size_t n = (rows + rows_per_shard - 1) / rows_per_shard;
    if (max_shards) n = std::min(n, max_shards);
    return std::max<std::size_t>(1, n);
  }
};

//! A type that decides a shard count for a shape and an element size.
template <class P>
concept Partitioner = requires(const P& p, const Shape& s, std::size_t b) {
  { p(s, b) } -> std::convertible_to<std::size_t>;
};

//! The rows of each of `shards` shards of `shape` (along axis 0).
inline std::vector<Range> partition_rows(const Shape& shape, std::size_t shards) {
  if (shards == 0) throw Error("partition_rows: a variable needs at least one shard");
  std::vector<Range> out;
  for (std::size_t i = 0; i < shards; ++i) out.push_back(shard_range(detail::rows_of(shape), shards, i));
  return out;
}

}  // namespace strata
