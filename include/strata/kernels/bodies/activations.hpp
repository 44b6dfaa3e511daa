#pragma once
//! The activations, written once for every backend: the Activation values,
//! and for each element-wise one a body with its value and its gradient.
//! The host loops (kernels/host/maps.hpp) and the CUDA kernels
//! (cuda/kernels/maps.cuh) run these bodies through visit_elementwise; only
//! Softmax, a per-row activation, has a loop of its own in each backend.
//!   float y = strata::kernels::bodies::Tanh{}(0.5f);
//!   strata::kernels::bodies::visit_elementwise(a, [&](auto act) { for (...) y[i] = act(x[i]); });
//!
//! Adding an element-wise activation: its value in `Activation`, its name in
//! activation_name, a body below (operator() for the value; grad(z, y, dy)
//! for dL/dz from the input z, the output y and dL/dy; needs_input when the
//! gradient needs z, which layers then keep), a case in visit_elementwise;
//! then a layer class in nn/ (and its line in nn.hpp) if it should be one.
//! Every backend, Dense's fused activation and the gradient checks pick it
//! up from here.

#include <cstdint>
#include <string_view>

#include <strata/kernels/bodies/hd.hpp>

namespace strata::kernels {

//! An activation applied after a layer's affine part.
enum class Activation { Linear, ReLU, Sigmoid, Tanh, Softmax, GELU };

constexpr std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::Linear: return "linear";
    case Activation::ReLU: return "relu";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::Tanh: return "tanh";
    case Activation::Softmax: return "softmax";
    case Activation::GELU: return "gelu";
  }
  return "?";
}

namespace bodies {

struct Linear {
  static constexpr bool needs_input = false;
  STRATA_HD float operator()(float z) const { return z; }
  STRATA_HD float grad(float /*z*/, float /*y*/, float dy) const { return dy; }
};

//! relu(NaN) = NaN (z > 0 alone would turn it into 0 and hide it); finite
//! inputs give exactly max(z, +0). The gradient is TensorFlow's ReluGrad: dy
//! where y > 0, else 0 (a NaN y gives 0 x dy), branch-free so that the host
//! loop vectorizes (a branch mispredicts with half the units active).
struct ReLU {
  static constexpr bool needs_input = false;
  STRATA_HD float operator()(float z) const { return (z > 0.f || is_nan(z)) ? z : 0.f; }
  STRATA_HD float grad(float /*z*/, float y, float dy) const { return mul(dy, y > 0.f ? 1.f : 0.f); }
};

struct Sigmoid {
  static constexpr bool needs_input = false;
  STRATA_HD float operator()(float z) const { return div(1.f, add(1.f, exp(-z))); }
  STRATA_HD float grad(float /*z*/, float y, float dy) const { return mul(mul(dy, y), sub(1.f, y)); }
};

struct Tanh {
  static constexpr bool needs_input = false;
  STRATA_HD float operator()(float z) const { return tanh(z); }
  STRATA_HD float grad(float /*z*/, float y, float dy) const { return mul(dy, sub(1.f, mul(y, y))); }
};

//! GELU in its exact form, z * Phi(z) with Phi(z) = erfc(-z / sqrt 2) / 2,
//! as Keras' default (approximate = false) and PyTorch's, rather than the
//! tanh approximation: one library call, and a short exact gradient
//! Phi(z) + z * phi(z). erfc rather than 1 + erf keeps the negative tail
//! accurate (1 + erf(-3) cancels to a few correct digits in float). Its
//! gradient needs z (GELU is not invertible from y).
struct GELU {
  static constexpr bool needs_input = true;
  static constexpr float inv_sqrt2 = 0.70710678118654752f, inv_sqrt_2pi = 0.39894228040143268f;
  STRATA_HD static float cdf(float z) { return mul(0.5f, erfc(mul(-z, inv_sqrt2))); }
  STRATA_HD float operator()(float z) const { return mul(z, cdf(z)); }
  STRATA_HD float grad(float z, float /*y*/, float dy) const {
    const float pdf = mul(inv_sqrt_2pi, exp(mul(-0.5f, mul(z, z))));
    return mul(dy, add(cdf(z), mul(z, pdf)));
  }
};

//! Calls f(body) with the body of element-wise activation `a` and returns
//! true; returns false for Softmax (per row), which has no element body.
template <class F>
constexpr bool visit_elementwise(Activation a, F&& f) {
  switch (a) {
    case Activation::Linear: f(Linear{}); return true;
    case Activation::ReLU: f(ReLU{}); return true;
    case Activation::Sigmoid: f(Sigmoid{}); return true;
    case Activation::Tanh: f(Tanh{}); return true;
    case Activation::GELU: f(GELU{}); return true;
    case Activation::Softmax: return false;
  }
  return false;
}

}  // namespace bodies

//! Whether `a`'s gradient needs the activation's input z, not only its
//! output y (then activation_backward must be given z).
constexpr bool activation_needs_input(Activation a) {
  bool needs = false;
  bodies::visit_elementwise(a, [&](auto act) { needs = decltype(act)::needs_input; });
  return needs;
}

}  // namespace strata::kernels
