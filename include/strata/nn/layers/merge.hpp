#pragma once
//! Layers of several inputs, for functional models (nn/program/node.hpp): Add
//! (element-wise sum, a residual connection) and Concatenate (along the
//! last axis). They take two or more inputs; a Sequential refuses them.
//!   strata::nn::Node x = strata::nn::Input{{64}};
//!   strata::nn::Node h = strata::nn::Dense{64}(x);
//!   strata::nn::Node y = strata::nn::Add{}(x, h);            // x + h
//!   strata::nn::Node z = strata::nn::Concatenate{}(x, h);    // [..., 128]

#include <span>
#include <string>
#include <vector>

#include <strata/nn/layers/layer.hpp>

namespace strata::nn {

//! A layer of two or more inputs. The executors call these forms; the
//! single-input forms of Layer refuse (it has no place in a Sequential).
class Merge : public Layer {
 public:
  //! Checks the inputs' per-sample shapes and returns the output's.
  virtual Shape build(std::span<const Shape> inputs) = 0;
  //! y = layer(xs...) on `c`.
  virtual void forward(Compute& c, std::span<const Act* const> xs, Act& y, const RunInfo& info) = 0;
  //! dL/dx_i into *dxs[i] (resized by the layer) for each dxs[i] that is not null.
  virtual void backward(Compute& c, std::span<const Act* const> xs, const Act& y, const Act& dy,
                        std::span<Act* const> dxs) = 0;

  Shape build(const Shape&) override { throw ShapeError(refusal()); }
  void forward(Compute&, const Act&, Act&, const RunInfo&) override { throw Error(refusal()); }
  void backward(Compute&, const Act&, const Act&, const Act&, Act*) override { throw Error(refusal()); }

 private:
  [[nodiscard]] std::string refusal() const {
    return kind() + " merges two or more inputs: use it in a functional model (strata::nn::Model built from "
                    "Nodes), not in a Sequential";
  }
};

namespace detail {
template <class Derived>
class MergeBase : public Merge {
 public:
  [[nodiscard]] std::unique_ptr<Layer> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};
inline void check_arity(const std::string& kind, std::size_t n) {
  if (n < 2) throw ShapeError(kind + ": takes two or more inputs, got " + std::to_string(n));
}
}  // namespace detail

//! y = x_0 + x_1 + ... (every input of one shape), summed in input order.
class Add final : public detail::MergeBase<Add> {
 public:
  [[nodiscard]] std::string kind() const override { return "Add"; }
  using Merge::backward;
  using Merge::build;
  using Merge::forward;

  Shape build(std::span<const Shape> inputs) override {
    detail::check_arity(kind(), inputs.size());
    for (std::size_t i = 1; i < inputs.size(); ++i)
      if (inputs[i] != inputs[0])
        throw ShapeError("Add: every input must have one shape; input 0 is " + inputs[0].str() + ", input " +
                         std::to_string(i) + " is " + inputs[i].str());
    shape_ = inputs[0];
    return shape_;
  }
  void forward(Compute& c, std::span<const Act* const> xs, Act& y, const RunInfo&) override {
    for (const Act* x : xs) detail::check_input("Add", shape_, *x);
    y.resize(c, xs[0]->shape());
    if (!y.size()) return;
    c.copy(y.data(), xs[0]->data(), y.size() * sizeof(float));
    for (std::size_t i = 1; i < xs.size(); ++i) c.axpy(1.f, xs[i]->data(), y.data(), y.size());
  }
  void backward(Compute& c, std::span<const Act* const>, const Act&, const Act& dy, std::span<Act* const> dxs) override {
    for (Act* dx : dxs)
      if (dx) {
        dx->resize(c, dy.shape());
        if (dy.size()) c.copy(dx->data(), dy.data(), dy.size() * sizeof(float));
      }
  }

 private:
  Shape shape_;
};

//! The inputs side by side along the last axis: [..., a] and [..., b] give
//! [..., a + b] (every other extent equal).
class Concatenate final : public detail::MergeBase<Concatenate> {
 public:
  [[nodiscard]] std::string kind() const override { return "Concatenate"; }
  using Merge::backward;
  using Merge::build;
  using Merge::forward;

  Shape build(std::span<const Shape> inputs) override {
    detail::check_arity(kind(), inputs.size());
    std::vector<Shape> in(inputs.begin(), inputs.end());
    std::size_t total = 0;
    widths_.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in[i].rank() == 0) throw ShapeError("Concatenate: input " + std::to_string(i) + " is a scalar per sample");
      auto lead = in[i].dims();
      auto first = in[0].dims();
      if (lead.size() != first.size() || !std::equal(lead.begin(), lead.end() - 1, first.begin()))
        throw ShapeError("Concatenate: inputs must agree on every axis but the last; input 0 is " + in[0].str() +
                         ", input " + std::to_string(i) + " is " + in[i].str());
      widths_.push_back(lead.back());
      total += lead.back();
    }
    std::vector<std::size_t> out(in[0].dims().begin(), in[0].dims().end());
    out.back() = total;
    inputs_ = std::move(in);
    return Shape(std::move(out));
  }
  void forward(Compute& c, std::span<const Act* const> xs, Act& y, const RunInfo&) override {
    for (std::size_t i = 0; i < xs.size(); ++i) detail::check_input("Concatenate", inputs_[i], *xs[i]);
    const std::size_t b = xs[0]->shape()[0];
    const std::size_t total = total_width();
    std::vector<std::size_t> dims{b};
    dims.insert(dims.end(), inputs_[0].dims().begin(), inputs_[0].dims().end());
    dims.back() = total;
    y.resize(c, Shape(std::move(dims)));
    const std::size_t rows = total ? y.size() / total : 0;
    std::size_t off = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const std::size_t w = widths_[i];
      if (rows && w)
        c.copy_2d(y.data() + off, total * sizeof(float), xs[i]->data(), w * sizeof(float), w * sizeof(float), rows);
      off += w;
    }
  }
  void backward(Compute& c, std::span<const Act* const> xs, const Act&, const Act& dy, std::span<Act* const> dxs) override {
    const std::size_t total = total_width();
    const std::size_t rows = total ? dy.size() / total : 0;
    std::size_t off = 0;
    for (std::size_t i = 0; i < dxs.size(); ++i) {
      const std::size_t w = widths_[i];
      if (dxs[i]) {
        dxs[i]->resize(c, xs[i]->shape());
        if (rows && w)
          c.copy_2d(dxs[i]->data(), w * sizeof(float), dy.data() + off, total * sizeof(float), w * sizeof(float), rows);
      }
      off += w;
    }
  }

 private:
  [[nodiscard]] std::size_t total_width() const {
    std::size_t t = 0;
    for (auto w : widths_) t += w;
    return t;
  }
  std::vector<Shape> inputs_;
  std::vector<std::size_t> widths_;
};

}  // namespace strata::nn
