#pragma once
//! Elementwise activations and softmax, shared by the activation layers and
//! by Dense's `activation` option. Each has a forward and a backward that
//! needs only the output y (true of all of these), so layers cache nothing.
//!   strata::nn::Dense{128, {.activation = strata::nn::Activation::ReLU}};

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string_view>

namespace strata::nn {

//! An activation applied after a layer's affine part.
enum class Activation { Linear, ReLU, Sigmoid, Tanh, Softmax };

namespace detail {

constexpr std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::Linear: return "linear";
    case Activation::ReLU: return "relu";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::Tanh: return "tanh";
    case Activation::Softmax: return "softmax";
  }
  return "?";
}

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

//! y = act(y) in place; `cols` is the softmax axis length.
inline void activate(Activation a, float* y, std::size_t n, std::size_t cols) {
  switch (a) {
    case Activation::Linear: return;
    case Activation::ReLU:
      for (std::size_t i = 0; i < n; ++i) y[i] = y[i] > 0.f ? y[i] : 0.f;
      return;
    case Activation::Sigmoid:
      for (std::size_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + std::exp(-y[i]));
      return;
    case Activation::Tanh:
      for (std::size_t i = 0; i < n; ++i) y[i] = std::tanh(y[i]);
      return;
    case Activation::Softmax:
      if (cols) softmax_rows(y, n / cols, cols);
      return;
  }
}

//! dz = dy where y > 0, else 0. Branch-free and vectorizable: with half the
//! units active a branch mispredicts constantly (it was 14% of a CNN step).
inline void relu_backward(const float* __restrict y, const float* dy, float* dz, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float mask = y[i] > 0.f ? 1.f : 0.f;
    dz[i] = dy[i] * mask;
  }
}

//! y = max(x, 0) from x (out of place, one pass).
inline void relu_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

//! dz = dL/dz from dy = dL/dy and the activation's output y (dz may alias dy).
inline void activation_backward(Activation a, const float* y, const float* dy, float* dz, std::size_t n,
                                std::size_t cols) {
  switch (a) {
    case Activation::Linear:
      if (dz != dy) std::copy_n(dy, n, dz);
      return;
    case Activation::ReLU:
      relu_backward(y, dy, dz, n);
      return;
    case Activation::Sigmoid:
      for (std::size_t i = 0; i < n; ++i) dz[i] = dy[i] * y[i] * (1.f - y[i]);
      return;
    case Activation::Tanh:
      for (std::size_t i = 0; i < n; ++i) dz[i] = dy[i] * (1.f - y[i] * y[i]);
      return;
    case Activation::Softmax:
      for (std::size_t r = 0; cols && r < n / cols; ++r) {
        const float* yr = y + r * cols;
        const float* dyr = dy + r * cols;
        float dot = 0.f;
        for (std::size_t j = 0; j < cols; ++j) dot += dyr[j] * yr[j];
        float* dzr = dz + r * cols;
        for (std::size_t j = 0; j < cols; ++j) dzr[j] = yr[j] * (dyr[j] - dot);
      }
      return;
  }
}

}  // namespace detail
}  // namespace strata::nn
