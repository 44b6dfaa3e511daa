#pragma once
//! Reshape each sample to a target shape with the same element count.
//!   strata::nn::Reshape{{28, 28, 1}}   // MNIST images -> NHWC for Conv2D

#include <algorithm>
#include <string>

#include <strata/nn/layer.hpp>

namespace strata::nn {

class Reshape final : public detail::LayerBase<Reshape> {
 public:
  explicit Reshape(Shape target) : target_(std::move(target)) {}
  [[nodiscard]] std::string kind() const override { return "Reshape"; }
  Shape build(const Shape& input) override {
    if (input.elements() != target_.elements())
      throw ShapeError("Reshape: cannot reshape per-sample shape " + input.str() + " (" +
                       std::to_string(input.elements()) + " elements) to " + target_.str() + " (" +
                       std::to_string(target_.elements()) + " elements)");
    in_ = input;
    return target_;
  }
  void forward(const Tensor<float>& x, Tensor<float>& y, const RunInfo&) override {
    detail::check_input("Reshape", in_, x);
    detail::resize(y, x.shape()[0], target_);
    std::copy_n(x.data(), x.size(), y.data());
  }
  void backward(const Tensor<float>&, const Tensor<float>& y, const Tensor<float>& dy, Tensor<float>* dx) override {
    if (!dx) return;
    detail::resize(*dx, y.shape()[0], in_);
    std::copy_n(dy.data(), dy.size(), dx->data());
  }

 private:
  Shape target_, in_;
};

}  // namespace strata::nn
