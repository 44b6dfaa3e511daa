#pragma once
//! The shared body of the activation layers (ReLU, Sigmoid, Tanh, Softmax):
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
  void forward(const Tensor<float>& x, Tensor<float>& y, const RunInfo&) override {
    check_input(this->kind(), shape_, x);
    resize(y, x.shape()[0], shape_);
    if constexpr (A == Activation::ReLU) {
      relu_forward(x.data(), y.data(), x.size());
    } else {
      std::copy_n(x.data(), x.size(), y.data());
      activate(A, y.data(), y.size(), last());
    }
  }
  void backward(const Tensor<float>&, const Tensor<float>& y, const Tensor<float>& dy, Tensor<float>* dx) override {
    if (!dx) return;
    resize(*dx, y.shape()[0], shape_);
    activation_backward(A, y.data(), dy.data(), dx->data(), y.size(), last());
  }

 private:
  std::size_t last() const { return shape_.rank() ? shape_.dims().back() : 1; }
  Shape shape_;
};

}  // namespace strata::nn::detail
