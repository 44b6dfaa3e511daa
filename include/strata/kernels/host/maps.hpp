#pragma once
//! Host elementwise maps and row/column reductions of the compute
//! vocabulary (kernels/compute.hpp): activations and their gradients,
//! column sums, axpy, dropout masks, the count of non-finite values. Plain
//! loops the compiler vectorizes, over the element bodies the CUDA kernels
//! run too (kernels/bodies/). A NaN input gives a NaN output, as in
//! TensorFlow (relu(NaN) = NaN; a softmax row holding a NaN is all NaN).
//!   strata::kernels::host::bias_activate(Activation::ReLU, y, bias, y, rows, cols);
//! Deterministic: fixed order.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <strata/core/error.hpp>
#include <strata/kernels/bodies/activations.hpp>
#include <strata/kernels/bodies/maps.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::kernels::host {

//! Softmax over rows of `cols` elements, in place, stable (max subtracted).
inline void softmax_rows(float* y, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = y + r * cols;
    const float m = *std::max_element(row, row + cols);
    float sum = 0.f;
    for (std::size_t j = 0; j < cols; ++j) sum += (row[j] = std::exp(row[j] - m));
    const float inv = 1.f / sum;
    for (std::size_t j = 0; j < cols; ++j) row[j] *= inv;
  }
}

//! y = act(x + bias) row by row (bias may be null; y may be x).
inline void bias_activate(Activation a, const float* x, const float* bias, float* y, std::size_t rows,
                          std::size_t cols) {
  const std::size_t n = rows * cols;
  if (bias) {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < cols; ++j) y[r * cols + j] = x[r * cols + j] + bias[j];
    x = y;
  }
  if (a == Activation::Softmax) {
    if (y != x) std::copy_n(x, n, y);
    if (cols) softmax_rows(y, rows, cols);
    return;
  }
  if (a == Activation::Linear) {
    if (y != x) std::copy_n(x, n, y);
    return;
  }
  bodies::visit_elementwise(a, [&](auto act) {
    for (std::size_t i = 0; i < n; ++i) y[i] = act(x[i]);
  });
}

//! ReLU's gradient (bodies::ReLU::grad: dy times a 0/1 mask) with y and dz
//! known not to alias, spelled so that GCC vectorizes it (through the body's
//! call it kept a compare and branch per element: 2.5% of an MNIST MLP
//! step, against 0.1%); layers_test checks it against the body, bitwise.
inline void relu_backward(const float* __restrict y, const float* dy, float* dz, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float mask = y[i] > 0.f ? 1.f : 0.f;
    dz[i] = dy[i] * mask;
  }
}

//! dz = dL/dz from dy = dL/dy, the activation's output y and its input z
//! (z may be null unless activation_needs_input(a)); dz may alias dy.
inline void activation_backward(Activation a, const float* z, const float* y, const float* dy, float* dz,
                                std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  if (a == Activation::Softmax) {
    for (std::size_t r = 0; cols && r < rows; ++r) {
      const float* yr = y + r * cols;
      const float* dyr = dy + r * cols;
      float dot = 0.f;
      for (std::size_t j = 0; j < cols; ++j) dot += dyr[j] * yr[j];
      float* dzr = dz + r * cols;
      for (std::size_t j = 0; j < cols; ++j) dzr[j] = yr[j] * (dyr[j] - dot);
    }
    return;
  }
  if (a == Activation::Linear) {
    if (dz != dy) std::copy_n(dy, n, dz);
    return;
  }
  if (a == Activation::ReLU) return relu_backward(y, dy, dz, n);
  if (activation_needs_input(a) && !z && n)
    throw Error(std::string("activation_backward: the gradient of ") + std::string(activation_name(a)) +
                " needs the activation's input z, and none was given");
  bodies::visit_elementwise(a, [&](auto act) {
    for (std::size_t i = 0; i < n; ++i) dz[i] = act.grad(z ? z[i] : 0.f, y[i], dy[i]);
  });
}

//! out[j] = sum over rows of x[r, j].
inline void column_sums(const float* x, float* out, std::size_t rows, std::size_t cols) {
  std::fill_n(out, cols, 0.f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < cols; ++j) out[j] += x[r * cols + j];
}

inline void axpy(float a, const float* x, float* y, std::size_t n) {
  const bodies::Axpy body{a};
  for (std::size_t i = 0; i < n; ++i) y[i] = body(x[i], y[i]);
}

//! Inverted dropout with the masks of strata::Rng{key} (draw i for element i).
inline void dropout(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key, float rate) {
  const bodies::DropoutMask draw{key, rate, 1.f / (1.f - rate)};
  for (std::size_t i = 0; i < n; ++i) {
    mask[i] = draw(i);
    y[i] = bodies::Multiply{}(x[i], mask[i]);
  }
}

inline void multiply(const float* x, const float* mask, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = bodies::Multiply{}(x[i], mask[i]);
}

//! Compression's rounding of g + res into T elements at `out`, the lost part into `next` (may be `res`).
template <class T>
void round_with_residual(const float* g, const float* res, float* next, T* out, std::size_t n) {
  const bodies::RoundWithResidual<T> body;
  for (std::size_t i = 0; i < n; ++i) next[i] = body(g[i], res[i], out[i]);
}
inline void round_to_wire(WireFormat f, const float* g, const float* res, float* next, void* out, std::size_t n) {
  visit_wire(f, [&](auto t) { round_with_residual(g, res, next, static_cast<decltype(t)*>(out), n); });
}
inline void expand_wire(WireFormat f, const void* w, float* g, std::size_t n) {
  visit_wire(f, [&](auto t) {
    const auto* x = static_cast<const decltype(t)*>(w);
    for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(x[i]);
  });
}

//! How many of x[0, n) are NaN or infinite: all exponent bits set. An
//! integer test, so the loop vectorizes (a float reduction would not).
inline std::size_t count_nonfinite(const float* x, std::size_t n) {
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bad += bodies::nonfinite_bits(u);
  }
  return static_cast<std::size_t>(bad);
}

}  // namespace strata::kernels::host
