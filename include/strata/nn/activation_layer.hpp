#pragma once
//! The shared body of the activation layers (ReLU, Sigmoid, Tanh, Softmax, ...):
//! any per-sample shape in, the same shape out, no parameters.

#include <string>

#include <strata/nn/activation.hpp>
#include <strata/nn/layer.hpp>

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
