#pragma once
//! Elementwise kernels: fill, the GEMM's k = 0 case, fused bias +
//! activation (softmax: one warp per row), activation gradients, axpy,
//! dropout (the host Rng's masks, bit for bit) and multiply. Products that
//! the host rounds separately use __fmul_rn/__fadd_rn, so nvcc cannot fuse
//! them into an FMA and the results stay bitwise equal to the host's.
//! NaN propagates as on the host: relu(NaN) = NaN, and a softmax row with a
//! NaN is all NaN (fmaxf skips it in the maximum, the sum of exponentials
//! does not).
//!   strata::cuda::detail::launch_bias_activate(s, Activation::ReLU, x, b, y, rows, cols);
//!   strata::cuda::detail::launch_dropout(s, x, y, mask, n, key, 0.5f);

#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda::detail {

__global__ void fill_kernel(float* x, float v, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) x[i] = v;
}

void launch_fill(cudaStream_t s, float* x, float value, std::size_t n) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), block_threads, 0, s>>>(x, value, n);
  check_launch("fill_kernel");
}

__global__ void scale_matrix_kernel(float* c, float beta, std::size_t rows, std::size_t cols, std::size_t ldc) {
  for (std::size_t i = global_index(); i < rows * cols; i += grid_stride()) {
    float& e = c[(i / cols) * ldc + i % cols];
    e = beta == 0.f ? 0.f : __fmul_rn(beta, e);
  }
}

void launch_scale_matrix(cudaStream_t s, float* c, float beta, std::size_t rows, std::size_t cols, std::size_t ldc) {
  if (rows == 0 || cols == 0) return;
  scale_matrix_kernel<<<blocks_for(rows * cols), block_threads, 0, s>>>(c, beta, rows, cols, ldc);
  check_launch("scale_matrix_kernel (gemm with k = 0)");
}

template <Activation A>
__device__ inline float activate(float v) {
  if constexpr (A == Activation::ReLU) return (v > 0.f || v != v) ? v : 0.f;  // relu(NaN) = NaN, as the host
  else if constexpr (A == Activation::Sigmoid) return 1.f / (1.f + expf(-v));
  else if constexpr (A == Activation::Tanh) return tanhf(v);
  else return v;
}

template <Activation A>
__global__ void bias_activate_kernel(const float* x, const float* bias, float* y, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  for (std::size_t i = global_index(); i < n; i += grid_stride())
    y[i] = activate<A>(bias ? __fadd_rn(x[i], bias[i % cols]) : x[i]);
}

//! One warp per row: max, sum of exponentials, then the normalized values
//! (each lane rewrites only the elements it read, so y may be x).
__global__ void softmax_rows_kernel(const float* x, const float* bias, float* y, std::size_t rows, std::size_t cols) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  const float* xr = x + row * cols;
  float* yr = y + row * cols;
  auto v = [&](std::size_t j) { return bias ? __fadd_rn(xr[j], bias[j]) : xr[j]; };
  float m = -INFINITY;
  for (std::size_t j = lane; j < cols; j += 32) m = fmaxf(m, v(j));
  m = warp_max(m);
  float sum = 0.f;
  for (std::size_t j = lane; j < cols; j += 32) sum += expf(v(j) - m);
  sum = warp_sum(sum);
  const float inv = 1.f / sum;
  for (std::size_t j = lane; j < cols; j += 32) yr[j] = __fmul_rn(expf(v(j) - m), inv);
}

void launch_bias_activate(cudaStream_t s, Activation a, const float* x, const float* bias, float* y, std::size_t rows,
                          std::size_t cols) {
  const std::size_t n = rows * cols;
  if (n == 0) return;
  switch (a) {
    case Activation::Linear:
      if (!bias) {
        if (x != y) check(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
        return;
      }
      bias_activate_kernel<Activation::Linear><<<blocks_for(n), block_threads, 0, s>>>(x, bias, y, rows, cols);
      break;
    case Activation::ReLU:
      bias_activate_kernel<Activation::ReLU><<<blocks_for(n), block_threads, 0, s>>>(x, bias, y, rows, cols);
      break;
    case Activation::Sigmoid:
      bias_activate_kernel<Activation::Sigmoid><<<blocks_for(n), block_threads, 0, s>>>(x, bias, y, rows, cols);
      break;
    case Activation::Tanh:
      bias_activate_kernel<Activation::Tanh><<<blocks_for(n), block_threads, 0, s>>>(x, bias, y, rows, cols);
      break;
    case Activation::Softmax:
      softmax_rows_kernel<<<blocks_for_rows(rows), block_threads, 0, s>>>(x, bias, y, rows, cols);
      break;
  }
  check_launch("bias_activate_kernel");
}

template <Activation A>
__global__ void activation_backward_kernel(const float* y, const float* dy, float* dz, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float yi = y[i], gi = dy[i];
    if constexpr (A == Activation::ReLU) dz[i] = __fmul_rn(gi, yi > 0.f ? 1.f : 0.f);
    else if constexpr (A == Activation::Sigmoid) dz[i] = __fmul_rn(__fmul_rn(gi, yi), 1.f - yi);
    else dz[i] = __fmul_rn(gi, __fsub_rn(1.f, __fmul_rn(yi, yi)));  // Tanh
  }
}

//! One warp per row: dz = y * (dy - <dy, y>) (dz may be dy: each lane
//! rewrites only what it read, after the warp's dot product).
__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dz, std::size_t rows,
                                        std::size_t cols) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* yr = y + row * cols;
  const float* gr = dy + row * cols;
  float dot = 0.f;
  for (std::size_t j = lane; j < cols; j += 32) dot += gr[j] * yr[j];
  dot = warp_sum(dot);
  for (std::size_t j = lane; j < cols; j += 32) dz[row * cols + j] = __fmul_rn(yr[j], gr[j] - dot);
}

void launch_activation_backward(cudaStream_t s, Activation a, const float* y, const float* dy, float* dz,
                                std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  if (n == 0) return;
  switch (a) {
    case Activation::Linear:
      if (dz != dy) check(cudaMemcpyAsync(dz, dy, n * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      return;
    case Activation::ReLU:
      activation_backward_kernel<Activation::ReLU><<<blocks_for(n), block_threads, 0, s>>>(y, dy, dz, n);
      break;
    case Activation::Sigmoid:
      activation_backward_kernel<Activation::Sigmoid><<<blocks_for(n), block_threads, 0, s>>>(y, dy, dz, n);
      break;
    case Activation::Tanh:
      activation_backward_kernel<Activation::Tanh><<<blocks_for(n), block_threads, 0, s>>>(y, dy, dz, n);
      break;
    case Activation::Softmax:
      softmax_backward_kernel<<<blocks_for_rows(rows), block_threads, 0, s>>>(y, dy, dz, rows, cols);
      break;
  }
  check_launch("activation_backward_kernel");
}

__global__ void axpy_kernel(float a, const float* x, float* y, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i]));
}

void launch_axpy(cudaStream_t s, float a, const float* x, float* y, std::size_t n) {
  if (n == 0) return;
  axpy_kernel<<<blocks_for(n), block_threads, 0, s>>>(a, x, y, n);
  check_launch("axpy_kernel");
}

__global__ void dropout_kernel(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key, float rate,
                               float scale) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float m = rng_uniform(key, i) < rate ? 0.f : scale;
    mask[i] = m;
    y[i] = __fmul_rn(x[i], m);
  }
}

void launch_dropout(cudaStream_t s, const float* x, float* y, float* mask, std::size_t n, std::uint64_t key,
                    float rate) {
  if (n == 0) return;
  const float scale = 1.f / (1.f - rate);  // on the host, as the host computes it
  dropout_kernel<<<blocks_for(n), block_threads, 0, s>>>(x, y, mask, n, key, rate, scale);
  check_launch("dropout_kernel");
}

__global__ void multiply_kernel(const float* x, const float* mask, float* y, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) y[i] = __fmul_rn(x[i], mask[i]);
}

void launch_multiply(cudaStream_t s, const float* x, const float* mask, float* y, std::size_t n) {
  if (n == 0) return;
  multiply_kernel<<<blocks_for(n), block_threads, 0, s>>>(x, mask, y, n);
  check_launch("multiply_kernel");
}

}  // namespace strata::cuda::detail
