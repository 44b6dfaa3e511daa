#pragma once
//! Elementwise kernels: fill, the GEMM's k = 0 case, fused bias +
//! activation (softmax: one warp per row), activation gradients, axpy,
//! dropout (the host Rng's masks, bit for bit) and multiply. The element
//! work is the host's own bodies (kernels/bodies/: activations, maps), run
//! by Thrust's for_each (for_each_index); their products and sums are
//! __fmul_rn/__fadd_rn, so nvcc cannot fuse them into an FMA and the
//! results stay bitwise equal to the host's (transcendentals: to rounding).
//! NaN propagates as on the host: relu(NaN) = NaN, and a softmax row with a
//! NaN is all NaN (fmaxf skips it in the maximum, the sum of exponentials
//! does not).
//!   strata::cuda::detail::launch_bias_activate(s, Activation::ReLU, x, b, y, rows, cols);
//!   strata::cuda::detail::launch_dropout(s, x, y, mask, n, key, 0.5f);

#include <strata/kernels/bodies/activations.hpp>
#include <strata/kernels/bodies/maps.hpp>
#include <strata/cuda/kernels/common.cuh>

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

//! y[i] = act(x[i] + bias[i % cols]) for an element-wise activation body.
template <class Act>
struct ActivateAt {
  Act act;
  const float* x;
  const float* bias;
  float* y;
  std::size_t cols;
  __device__ void operator()(std::size_t i) const { y[i] = act(bias ? bodies::add(x[i], bias[i % cols]) : x[i]); }
};

//! dz[i] = act.grad(z[i], y[i], dy[i]) (z null: the body needs only y).
template <class Act>
struct ActivationGradAt {
  Act act;
  const float* z;
  const float* y;
  const float* dy;
  float* dz;
  __device__ void operator()(std::size_t i) const { dz[i] = act.grad(z ? z[i] : 0.f, y[i], dy[i]); }
};

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
  if (a == Activation::Linear && !bias) {
    if (x != y) check(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    return;
  }
  if (a == Activation::Softmax) {
    softmax_rows_kernel<<<blocks_for_rows(rows), block_threads, 0, s>>>(x, bias, y, rows, cols);
    check_launch("softmax_rows_kernel");
    return;
  }
  bodies::visit_elementwise(a, [&](auto act) {
    for_each_index(s, n, ActivateAt<decltype(act)>{act, x, bias, y, cols}, "bias_activate (for_each)");
  });
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

void launch_activation_backward(cudaStream_t s, Activation a, const float* z, const float* y, const float* dy,
                                float* dz, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  if (n == 0) return;
  if (a == Activation::Linear) {
    if (dz != dy) check(cudaMemcpyAsync(dz, dy, n * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    return;
  }
  if (a == Activation::Softmax) {
    softmax_backward_kernel<<<blocks_for_rows(rows), block_threads, 0, s>>>(y, dy, dz, rows, cols);
    check_launch("softmax_backward_kernel");
    return;
  }
  if (kernels::activation_needs_input(a) && !z)
    throw Error(std::string("activation_backward: the gradient of ") + std::string(kernels::activation_name(a)) +
                " needs the activation's input z, and none was given");
  bodies::visit_elementwise(a, [&](auto act) {
    for_each_index(s, n, ActivationGradAt<decltype(act)>{act, z, y, dy, dz}, "activation_backward (for_each)");
  });
}

struct AxpyAt {
  bodies::Axpy body;
  const float* x;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] = body(x[i], y[i]); }
};

void launch_axpy(cudaStream_t s, float a, const float* x, float* y, std::size_t n) {
  for_each_index(s, n, AxpyAt{{a}, x, y}, "axpy (for_each)");
}

struct DropoutAt {
  bodies::DropoutMask draw;
  const float* x;
  float* y;
  float* mask;
  __device__ void operator()(std::size_t i) const {
    const float m = draw(i);
    mask[i] = m;
    y[i] = bodies::Multiply{}(x[i], m);
  }
};

void launch_dropout(cudaStream_t s, const float* x, float* y, float* mask, std::size_t n, std::uint64_t key,
                    float rate) {
  // the scale on the host, as the host computes it
  for_each_index(s, n, DropoutAt{{key, rate, 1.f / (1.f - rate)}, x, y, mask}, "dropout (for_each)");
}

//! Dropout with the key of the iteration in device memory (Compute::dropout_at).
struct DropoutAtStep {
  std::uint64_t key_base, layer, salt;
  const kernels::StepCounters* c;
  float rate, scale;
  const float* x;
  float* y;
  float* mask;
  __device__ void operator()(std::size_t i) const {
    const bodies::DropoutMask draw{strata::detail::mix(key_base, c->iteration, layer, salt), rate, scale};
    const float m = draw(i);
    mask[i] = m;
    y[i] = bodies::Multiply{}(x[i], m);
  }
};

void launch_dropout_at(cudaStream_t s, const float* x, float* y, float* mask, std::size_t n, std::uint64_t key_base,
                       std::uint64_t layer, std::uint64_t salt, const kernels::StepCounters* c, float rate) {
  for_each_index(s, n, DropoutAtStep{key_base, layer, salt, c, rate, 1.f / (1.f - rate), x, y, mask},
                 "dropout_at (for_each)");
}

struct MultiplyAt {
  const float* x;
  const float* mask;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] = bodies::Multiply{}(x[i], mask[i]); }
};

void launch_multiply(cudaStream_t s, const float* x, const float* mask, float* y, std::size_t n) {
  for_each_index(s, n, MultiplyAt{x, mask, y}, "multiply (for_each)");
}

//! Gradient compression's rounding: the host's body (bodies::RoundWithResidual), so the same bits.
template <class T>
struct RoundToWireAt {
  const float* g;
  const float* res;
  float* next;  // may be res: element i reads res[i] before writing next[i]
  T* out;
  __device__ void operator()(std::size_t i) const { next[i] = bodies::RoundWithResidual<T>{}(g[i], res[i], out[i]); }
};

void launch_round_to_wire(cudaStream_t s, WireFormat f, const float* g, const float* res, float* next, void* out,
                          std::size_t n) {
  visit_wire(f, [&](auto t) {
    using T = decltype(t);
    for_each_index(s, n, RoundToWireAt<T>{g, res, next, static_cast<T*>(out)}, "round_to_wire (for_each)");
  });
}

template <class T>
struct ExpandWireAt {
  const T* w;
  float* g;
  __device__ void operator()(std::size_t i) const { g[i] = static_cast<float>(w[i]); }
};

void launch_expand_wire(cudaStream_t s, WireFormat f, const void* w, float* g, std::size_t n) {
  visit_wire(f, [&](auto t) {
    using T = decltype(t);
    for_each_index(s, n, ExpandWireAt<T>{static_cast<const T*>(w), g}, "expand_wire (for_each)");
  });
}

}  // namespace strata::cuda::detail
