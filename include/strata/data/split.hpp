#pragma once
//! Distributing a global batch over replicas: its size, a copy of a range of
//! its rows, and a balanced split (the rule of strata::shard_range).
//!   auto parts = strata::data::split_batch(batch, 4);   // parts[r]: replica r's rows
//!   std::size_t n = strata::data::batch_size(parts[0]);

#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/data/element.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::data {

//! The number of rows (leading extent) of a batch; every component of a tuple
//! must have the same. Throws ShapeError for a scalar or disagreeing extents.
//!   auto [x, y] = *ds.batch(128).iterator().next();
//!   std::size_t n = strata::data::batch_size(std::tuple{x, y});   // 128 (or fewer, last batch)
template <DatasetElement E>
std::size_t batch_size(const E& batch) {
  std::size_t n = 0;
  Shape first;
  detail::for_each_index<detail::components_v<E>>([&](auto k) {
    const Shape& s = detail::component<k>(batch).shape();
    if (s.rank() == 0)
      throw ShapeError("batch_size: " + detail::component_name<E>(k) +
                       "is a scalar (shape []); a batch needs a leading batch axis");
    if (k == 0) {
      n = s[0];
      first = s;
    } else if (s[0] != n) {
      throw ShapeError("batch_size: component " + std::to_string(k) + " has " + std::to_string(s[0]) +
                       " rows (shape " + s.str() + ") but component 0 has " + std::to_string(n) + " (shape " +
                       first.str() + "); every component of a batch must have the same leading extent");
    }
  });
  return n;
}

//! A copy of rows [begin, end) of every component; an empty range gives
//! tensors with leading extent 0 and the same trailing shape.
//!   auto head = strata::data::slice_rows(batch, 0, 10);
//!   auto none = strata::data::slice_rows(batch, 5, 5);   // [0, ...]
template <DatasetElement E>
E slice_rows(const E& batch, std::size_t begin, std::size_t end) {
  const std::size_t n = batch_size(batch);
  if (begin > end || end > n)
    throw ShapeError("slice_rows: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") are not a valid range of a batch of " + std::to_string(n) +
                     " rows (expected begin <= end <= " + std::to_string(n) + ")");
  E out;
  detail::for_each_index<detail::components_v<E>>([&](auto k) {
    const auto& src = detail::component<k>(batch);
    using T = typename std::remove_cvref_t<decltype(src)>::value_type;
    std::size_t row = 1;  // elements per row; computed from the extents, since n may be 0
    for (std::size_t d = 1; d < src.shape().rank(); ++d) row *= src.shape()[d];
    Tensor<T> t(detail::with_leading(end - begin, src.shape(), 1));
    if (t.size()) std::memcpy(t.data(), src.data() + begin * row, t.bytes());
    detail::component<k>(out) = std::move(t);
  });
  return out;
}

//! Splits a batch into `replicas` contiguous, balanced parts (sizes differ by
//! at most one, the first ones longer). A batch smaller than the replica
//! count leaves the last replicas with empty (leading extent 0) parts.
//!   auto parts = strata::data::split_batch(batch, 4);   // 3 rows -> 1, 1, 1, 0
//!   for (int r = 0; r < 4; ++r) feed(r, parts[r]);
template <DatasetElement E>
std::vector<E> split_batch(const E& batch, int replicas) {
  if (replicas < 1)
    throw Error("split_batch: replicas must be at least 1, got " + std::to_string(replicas));
  const std::size_t n = batch_size(batch);
  const auto parts = static_cast<std::size_t>(replicas);
  std::vector<E> out;
  out.reserve(parts);
  for (std::size_t r = 0; r < parts; ++r) {
    const Range rows = shard_range(n, parts, r);
    out.push_back(slice_rows(batch, rows.begin, rows.end));
  }
  return out;
}

}  // namespace strata::data
