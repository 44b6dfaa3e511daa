#pragma once
//! Image kernels over NHWC batches (kernels::Window2D): im2col, its adjoint
//! col2im, and max pooling with its gradient. The two adjoints are written
//! as gathers (each input element sums its own contributions, windows in
//! row-major order) rather than scattered atomic adds, so they are
//! deterministic and add in the host's order: all four are bitwise equal to
//! the host's. Each thread runs one element body of kernels/bodies/
//! windows.hpp (through Thrust's for_each), the bodies the host's tests
//! compare with its own row-at-a-time loops.
//!   strata::cuda::detail::launch_im2col(s, g, x, col);        // col: [batch*oh*ow, kh*kw*c]
//!   strata::cuda::detail::launch_max_pool(s, g, x, y, argmax);

#include <strata/kernels/bodies/windows.hpp>
#include <strata/cuda/kernels/common.cuh>

namespace strata::cuda::detail {

struct Im2colAt {
  Window2D g;
  const float* x;
  float* col;
  __device__ void operator()(std::size_t e) const { col[e] = bodies::im2col_element(g, x, e); }
};

void launch_im2col(cudaStream_t s, const Window2D& g, const float* x, float* col) {
  for_each_index(s, g.batch * g.oh * g.ow * g.kh * g.kw * g.c, Im2colAt{g, x, col}, "im2col (for_each)");
}

struct Col2imAt {
  Window2D g;
  const float* col;
  float* dx;
  __device__ void operator()(std::size_t e) const { dx[e] = bodies::col2im_element(g, col, e); }
};

void launch_col2im(cudaStream_t s, const Window2D& g, const float* col, float* dx) {
  const std::size_t total = g.batch * g.h * g.w * g.c;
  if (total == 0) return;
  if (g.oh == 0 || g.ow == 0) return launch_fill(s, dx, 0.f, total);
  for_each_index(s, total, Col2imAt{g, col, dx}, "col2im (for_each)");
}

struct MaxPoolAt {
  Window2D g;
  const float* x;
  float* y;
  std::uint32_t* argmax;
  __device__ void operator()(std::size_t e) const { y[e] = bodies::max_pool_element(g, x, e, argmax + e); }
};

void launch_max_pool(cudaStream_t s, const Window2D& g, const float* x, float* y, std::uint32_t* argmax) {
  for_each_index(s, g.batch * g.oh * g.ow * g.c, MaxPoolAt{g, x, y, argmax}, "max_pool (for_each)");
}

struct MaxPoolBackwardAt {
  Window2D g;
  const float* dy;
  const std::uint32_t* argmax;
  float* dx;
  __device__ void operator()(std::size_t e) const { dx[e] = bodies::max_pool_backward_element(g, dy, argmax, e); }
};

void launch_max_pool_backward(cudaStream_t s, const Window2D& g, const float* dy, const std::uint32_t* argmax,
                              float* dx) {
  const std::size_t total = g.batch * g.h * g.w * g.c;
  if (total == 0) return;
  if (g.oh == 0 || g.ow == 0) return launch_fill(s, dx, 0.f, total);
  for_each_index(s, total, MaxPoolBackwardAt{g, dy, argmax, dx}, "max_pool_backward (for_each)");
}

}  // namespace strata::cuda::detail
