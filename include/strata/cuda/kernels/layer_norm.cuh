#pragma once
//! Layer normalization: one warp per row running the host's row bodies
//! (kernels/bodies/layer_norm.hpp) with WarpLanes; the sums meet in the
//! butterfly the host's HostLanes reproduces, so the results are bitwise
//! equal to the host's.
//!   strata::cuda::detail::launch_layer_norm(s, x, gamma, beta, y, xhat, rstd, rows, cols, 1e-3f);

#include <strata/kernels/bodies/layer_norm.hpp>
#include <strata/cuda/kernels/common.cuh>

namespace strata::cuda::detail {

__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, float* y, float* xhat,
                                  float* rstd, std::size_t rows, std::size_t cols, float eps) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const std::size_t at = row * cols;
  bodies::layer_norm_row(WarpLanes{threadIdx.x % 32}, x + at, gamma, beta, y + at, xhat + at, rstd + row, cols, eps);
}

void launch_layer_norm(cudaStream_t s, const float* x, const float* gamma, const float* beta, float* y, float* xhat,
                       float* rstd, std::size_t rows, std::size_t cols, float eps) {
  if (rows == 0 || cols == 0) return;
  layer_norm_kernel<<<blocks_for_rows(rows), block_threads, 0, s>>>(x, gamma, beta, y, xhat, rstd, rows, cols, eps);
  check_launch("layer_norm_kernel");
}

__global__ void layer_norm_backward_kernel(const float* dy, const float* xhat, const float* rstd, const float* gamma,
                                           float* dx, float* dgamma_rows, std::size_t rows, std::size_t cols) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  if (row >= rows) return;
  const std::size_t at = row * cols;
  bodies::layer_norm_backward_row(WarpLanes{threadIdx.x % 32}, dy + at, xhat + at, rstd[row], gamma,
                                  dx ? dx + at : nullptr, dgamma_rows + at, cols);
}

void launch_layer_norm_backward(cudaStream_t s, const float* dy, const float* xhat, const float* rstd,
                                const float* gamma, float* dx, float* dgamma_rows, std::size_t rows, std::size_t cols) {
  if (rows == 0 || cols == 0) return;
  layer_norm_backward_kernel<<<blocks_for_rows(rows), block_threads, 0, s>>>(dy, xhat, rstd, gamma, dx, dgamma_rows,
                                                                            rows, cols);
  check_launch("layer_norm_backward_kernel");
}

}  // namespace strata::cuda::detail
