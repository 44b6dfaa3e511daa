#pragma once
//! What attention and embeddings compute, written once for every backend:
//! the (causal) softmax of a row of attention scores against a lane policy
//! (bodies/rows.hpp: the host plays a warp's 32 lanes, a GPU runs one warp
//! per row), and the gather and the deterministic gradient of an embedding
//! table. The host loops are kernels/host/attention.hpp, the CUDA kernels
//! cuda/kernels/attention.cuh.
//!   strata::kernels::bodies::attention_softmax_row(HostLanes{}, scores, weights, t, q + 1);   // causal row q
//!   const long long v = strata::kernels::bodies::class_of(ids[i], vocab);                      // -1: no row

#include <cstddef>

#include <strata/kernels/bodies/losses.hpp>
#include <strata/kernels/bodies/rows.hpp>

namespace strata::kernels::bodies {

//! y[j] = softmax(x[0, valid))_j for j < valid and 0 for valid <= j < cols
//! (the masked keys of a causal row: their weights, and so their gradient
//! through activation_backward's softmax, are exactly 0). Stable: the row's
//! maximum is subtracted. A NaN among the valid scores makes them all NaN
//! (fmax skips it in the maximum, the sum of exponentials does not). y may be x.
template <class Lanes>
STRATA_HD void attention_softmax_row(const Lanes& lanes, const float* x, float* y, std::size_t cols,
                                     std::size_t valid) {
  const float m = lanes.max([&](unsigned l) { return lane_max(l, valid, [&](std::size_t j) { return x[j]; }); });
  const float sum =
      lanes.sum([&](unsigned l) { return lane_sum(l, valid, [&](std::size_t j) { return exp(sub(x[j], m)); }); });
  for (std::size_t j = lanes.first(); j < cols; j += lanes.step()) y[j] = j < valid ? div(exp(sub(x[j], m)), sum) : 0.f;
}

//! The keys row `r` of stacked cols x cols score matrices may see: all of
//! them, or, causal, those up to its own position r % cols.
STRATA_HD inline std::size_t attention_valid(std::size_t r, std::size_t cols, bool causal) {
  return causal ? r % cols + 1 : cols;
}

//! One element of an embedding lookup: y[i, col] = table[ids[i], col], NaN
//! for an id that names no row (the host checks first and throws; a GPU
//! lets the NaN reach the loss).
struct EmbeddingGather {
  const float* table;
  const float* ids;
  float* y;
  std::size_t vocab, width;
  STRATA_HD void operator()(std::size_t e) const {
    const std::size_t i = e / width, col = e % width;
    const long long v = class_of(ids[i], vocab);
    y[e] = v < 0 ? NAN : table[static_cast<std::size_t>(v) * width + col];
  }
};

//! One element of an embedding table's gradient: dtable[v, col] = the sum of
//! dy[i, col] over the positions i whose id is v, added in the order of i
//! from 0.f (no atomics: the same bits in every space and every run). Ids
//! that name no row add nothing.
struct EmbeddingGradAt {
  const float* ids;
  const float* dy;
  float* dtable;
  std::size_t n, vocab, width;
  STRATA_HD void operator()(std::size_t e) const {
    const auto v = static_cast<long long>(e / width);
    const std::size_t col = e % width;
    float s = 0.f;
    for (std::size_t i = 0; i < n; ++i)
      if (class_of(ids[i], vocab) == v) s = add(s, dy[i * width + col]);
    dtable[e] = s;
  }
};

}  // namespace strata::kernels::bodies
