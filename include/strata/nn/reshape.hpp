#pragma once
//! Reshape each sample to a target shape with the same element count.
//!   strata::nn::Reshape{{28, 28, 1}}   // MNIST images -> NHWC for Conv2D

#include <algorithm>
#include <string>

#include <strata/nn/layer.hpp>

namespace strata::nn {

namespace detail {
//! Layers that only change the per-sample shape (Flatten, Reshape): the
//! elements are copied unchanged both ways.
template <class Derived>
class Relabel : public LayerBase<Derived> {
 public:
  void forward(const Tensor<float>& x, Tensor<float>& y, const RunInfo&) override {
    check_input(this->kind(), in_, x);
    resize(y, x.shape()[0], out_);
    std::copy_n(x.data(), x.size(), y.data());
  }
  void backward(const Tensor<float>&, const Tensor<float>& y, const Tensor<float>& dy, Tensor<float>* dx) override {
    if (!dx) return;
    resize(*dx, y.shape()[0], in_);
    std::copy_n(dy.data(), dy.size(), dx->data());
  }

 protected:
  Shape set_shapes(const Shape& in, Shape out) {
    in_ = in;
    out_ = std::move(out);
    return out_;
  }

 private:
  Shape in_, out_;
};
}  // namespace detail

class Reshape final : public detail::Relabel<Reshape> {
 public:
  explicit Reshape(Shape target) : target_(std::move(target)) {}
  [[nodiscard]] std::string kind() const override { return "Reshape"; }
  Shape build(const Shape& input) override {
    if (input.elements() != target_.elements())
      throw ShapeError("Reshape: cannot reshape per-sample shape " + input.str() + " (" +
                       std::to_string(input.elements()) + " elements) to " + target_.str() + " (" +
                       std::to_string(target_.elements()) + " elements)");
    return set_shapes(input, target_);
  }

 private:
  Shape target_;
};

}  // namespace strata::nn
