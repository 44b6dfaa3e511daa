#pragma once
//! The activation layers: ReLU (max(x, 0)), Sigmoid (1 / (1 + exp(-x))),
//! Tanh, Softmax over the last axis (the row maximum subtracted) and GELU
//! in its exact form, x / 2 * (1 + erf(x / sqrt 2)) (kernels/bodies/
//! activations.hpp). Any per-sample shape in, the same shape out, no
//! parameters; one body (ActivationLayer) for all five.
//!   strata::nn::Sequential model{strata::nn::Dense{64}, strata::nn::ReLU{}, strata::nn::Dense{10},
//!                                strata::nn::Softmax{}};

#include <string>

#include <strata/nn/layers/activation.hpp>
#include <strata/nn/layers/layer.hpp>

namespace strata::nn::detail {

template <class Derived, Activation A>
class ActivationLayer : public LayerBase<Derived> {
 public:
  Shape build(const Shape& input) override {
    if (A == Activation::Softmax && (input.rank() == 0 || input.dims().back() == 0))
      throw ShapeError(this->kind() + ": needs a non-empty last axis to normalize over, got per-sample shape " +
                       input.str());
    shape_ = input;
    return input;
  }
  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo&) override {
    check_input(this->kind(), shape_, x);
    resize(c, y, x.shape()[0], shape_);
    if (x.size()) c.bias_activate(A, x.data(), nullptr, y.data(), x.size() / last(), last());
  }
  void backward(Compute& c, const Act& x, const Act& y, const Act& dy, Act* dx) override {
    if (!dx) return;
    resize(c, *dx, y.shape()[0], shape_);
    if (y.size()) c.activation_backward(A, x.data(), y.data(), dy.data(), dx->data(), y.size() / last(), last());
  }

 private:
  std::size_t last() const { return shape_.rank() ? shape_.dims().back() : 1; }
  Shape shape_;
};

}  // namespace strata::nn::detail

namespace strata::nn {

class ReLU final : public detail::ActivationLayer<ReLU, Activation::ReLU> {
 public:
  [[nodiscard]] std::string kind() const override { return "ReLU"; }
};

class Sigmoid final : public detail::ActivationLayer<Sigmoid, Activation::Sigmoid> {
 public:
  [[nodiscard]] std::string kind() const override { return "Sigmoid"; }
};

class Tanh final : public detail::ActivationLayer<Tanh, Activation::Tanh> {
 public:
  [[nodiscard]] std::string kind() const override { return "Tanh"; }
};

class Softmax final : public detail::ActivationLayer<Softmax, Activation::Softmax> {
 public:
  [[nodiscard]] std::string kind() const override { return "Softmax"; }
};

class GELU final : public detail::ActivationLayer<GELU, Activation::GELU> {
 public:
  [[nodiscard]] std::string kind() const override { return "GELU"; }
};

}  // namespace strata::nn
