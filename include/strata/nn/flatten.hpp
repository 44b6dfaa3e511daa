#pragma once
//! Flatten: [batch, d1, d2, ...] -> [batch, d1*d2*...]. No parameters.
//!   strata::nn::Sequential model{strata::nn::Input{{28, 28}}, strata::nn::Flatten{}, strata::nn::Dense{10}};

#include <algorithm>
#include <string>

#include <strata/nn/layer.hpp>

namespace strata::nn {

class Flatten final : public detail::LayerBase<Flatten> {
 public:
  [[nodiscard]] std::string kind() const override { return "Flatten"; }
  Shape build(const Shape& input) override {
    in_ = input;
    return Shape{input.elements()};
  }
  void forward(const Tensor<float>& x, Tensor<float>& y, const RunInfo&) override {
    detail::check_input("Flatten", in_, x);
    detail::resize(y, x.shape()[0], Shape{in_.elements()});
    std::copy_n(x.data(), x.size(), y.data());
  }
  void backward(const Tensor<float>&, const Tensor<float>& y, const Tensor<float>& dy, Tensor<float>* dx) override {
    if (!dx) return;
    detail::resize(*dx, y.shape()[0], in_);
    std::copy_n(dy.data(), dy.size(), dx->data());
  }

 private:
  Shape in_;
};

}  // namespace strata::nn
