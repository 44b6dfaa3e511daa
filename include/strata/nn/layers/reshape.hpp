#pragma once
//! Reshape each sample to a target shape with the same element count.
//!   strata::nn::Reshape{{28, 28, 1}}   // MNIST images -> NHWC for Conv2D

#include <algorithm>
#include <string>

#include <strata/nn/layers/layer.hpp>

namespace strata::nn {

namespace detail {
//! Layers that only change the per-sample shape (Flatten, Reshape): the
//! elements are copied unchanged both ways.
template <class Derived>
class Relabel : public LayerBase<Derived> {
 public:
  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo&) override {
    check_input(this->kind(), in_, x);
    resize(c, y, x.shape()[0], out_);
    c.copy(y.data(), x.data(), x.size() * sizeof(float));
  }
  void backward(Compute& c, const Act&, const Act& y, const Act& dy, Act* dx) override {
    if (!dx) return;
    resize(c, *dx, y.shape()[0], in_);
    c.copy(dx->data(), dy.data(), dy.size() * sizeof(float));
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
