#pragma once
//! Attention and embedding kernels: the (causal) softmax of score rows, one
//! warp per row running the host's row body (kernels/bodies/attention.hpp)
//! with WarpLanes; the embedding gather, one thread per element; and the
//! embedding table's gradient, one thread per (row, column) of the table
//! summing the positions in order (no atomics: bitwise the host's scatter,
//! every run). An id that names no row gives a row of NaN (the host throws).
//!   strata::cuda::detail::launch_attention_softmax(s, scores, weights, batch * heads * t, t, true);

#include <strata/kernels/bodies/attention.hpp>
#include <strata/cuda/kernels/common.cuh>

namespace strata::cuda::detail {

__global__ void attention_softmax_kernel(const float* x, float* y, std::size_t rows, std::size_t cols, bool causal) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const std::size_t at = row * cols;
  bodies::attention_softmax_row(WarpLanes{threadIdx.x % 32}, x + at, y + at, cols,
                                bodies::attention_valid(row, cols, causal));
}

void launch_attention_softmax(cudaStream_t s, const float* x, float* y, std::size_t rows, std::size_t cols,
                              bool causal) {
  if (rows == 0 || cols == 0) return;
  attention_softmax_kernel<<<blocks_for_rows(rows), block_threads, 0, s>>>(x, y, rows, cols, causal);
  check_launch("attention_softmax_kernel");
}

void launch_embedding(cudaStream_t s, const float* table, const float* ids, float* y, std::size_t n,
                      std::size_t vocab, std::size_t width) {
  for_each_index(s, n * width, bodies::EmbeddingGather{table, ids, y, vocab, width}, "embedding (gather)");
}

void launch_embedding_backward(cudaStream_t s, const float* ids, const float* dy, float* dtable, std::size_t n,
                               std::size_t vocab, std::size_t width) {
  for_each_index(s, vocab * width, bodies::EmbeddingGradAt{ids, dy, dtable, n, vocab, width}, "embedding_backward");
}

}  // namespace strata::cuda::detail
