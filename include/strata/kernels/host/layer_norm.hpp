#pragma once
//! Host layer normalization of the compute vocabulary (kernels/compute.hpp):
//! each row through the body a GPU warp runs too (kernels/bodies/
//! layer_norm.hpp), its sums over 32 lanes in the warp's order, so the
//! host and the CUDA backend give the same bits.
//!   strata::kernels::host::layer_norm(x, gamma, beta, y, xhat, rstd, rows, cols, 1e-3f);
//! Deterministic: rows in order.

#include <cstddef>

#include <strata/kernels/bodies/layer_norm.hpp>

namespace strata::kernels::host {

inline void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* xhat, float* rstd,
                       std::size_t rows, std::size_t cols, float eps) {
  if (cols == 0) return;
  for (std::size_t r = 0; r < rows; ++r)
    bodies::layer_norm_row(bodies::HostLanes{}, x + r * cols, gamma, beta, y + r * cols, xhat + r * cols, rstd + r,
                           cols, eps);
}

inline void layer_norm_backward(const float* dy, const float* xhat, const float* rstd, const float* gamma, float* dx,
                                float* dgamma_rows, std::size_t rows, std::size_t cols) {
  if (cols == 0) return;
  for (std::size_t r = 0; r < rows; ++r)
    bodies::layer_norm_backward_row(bodies::HostLanes{}, dy + r * cols, xhat + r * cols, rstd[r], gamma,
                                    dx ? dx + r * cols : nullptr, dgamma_rows + r * cols, cols);
}

}  // namespace strata::kernels::host
