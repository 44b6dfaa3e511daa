#pragma once
//! Host attention and embedding ops of the compute vocabulary
//! (kernels/compute.hpp): the causal softmax of score rows and the
//! embedding gather and its gradient, over the bodies the CUDA kernels run
//! too (kernels/bodies/attention.hpp). An embedding id that names no row
//! throws, naming its example and position.
//!   strata::kernels::host::attention_softmax(scores, weights, batch * heads * t, t, true);
//! Deterministic: rows and positions in order.

#include <algorithm>
#include <cstddef>
#include <string>

#include <strata/core/error.hpp>
#include <strata/kernels/bodies/attention.hpp>

namespace strata::kernels::host {

inline void attention_softmax(const float* x, float* y, std::size_t rows, std::size_t cols, bool causal) {
  if (cols == 0) return;
  for (std::size_t r = 0; r < rows; ++r)
    bodies::attention_softmax_row(bodies::HostLanes{}, x + r * cols, y + r * cols, cols,
                                  bodies::attention_valid(r, cols, causal));
}

//! The row `ids[i]` names, or an Error naming example i / steps and its position.
inline std::size_t embedding_row(const float* ids, std::size_t i, std::size_t steps, std::size_t vocab) {
  const long long v = bodies::class_of(ids[i], vocab);
  if (v < 0)
    throw Error("Embedding: id " + std::to_string(ids[i]) + " at example " + std::to_string(i / steps) +
                ", position " + std::to_string(i % steps) + " is not a token index in [0, " + std::to_string(vocab) +
                ")");
  return static_cast<std::size_t>(v);
}

inline void embedding(const float* table, const float* ids, float* y, std::size_t examples, std::size_t steps,
                      std::size_t vocab, std::size_t width) {
  const std::size_t n = examples * steps;
  for (std::size_t i = 0; i < n; ++i) embedding_row(ids, i, steps, vocab);  // all checked before any is written
  for (std::size_t i = 0; i < n; ++i)
    std::copy_n(table + static_cast<std::size_t>(bodies::class_of(ids[i], vocab)) * width, width, y + i * width);
}

//! bodies::EmbeddingGradAt's sums, added in the same order (position by
//! position from 0.f) but as a scatter: one pass over dy instead of one per
//! table row, the same bits.
inline void embedding_backward(const float* ids, const float* dy, float* dtable, std::size_t n, std::size_t vocab,
                               std::size_t width) {
  std::fill_n(dtable, vocab * width, 0.f);
  for (std::size_t i = 0; i < n; ++i) {
    const long long v = bodies::class_of(ids[i], vocab);
    if (v < 0) continue;
    float* row = dtable + static_cast<std::size_t>(v) * width;
    const float* g = dy + i * width;
    for (std::size_t j = 0; j < width; ++j) row[j] = bodies::add(row[j], g[j]);
  }
}

}  // namespace strata::kernels::host
