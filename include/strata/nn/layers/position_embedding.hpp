#pragma once
//! PositionEmbedding: a learned embedding of the position, as keras_nlp's
//! PositionEmbedding. The input is [batch, T, W]; the parameter
//! "embeddings" [T, W] (glorot-uniform, fan_in T, fan_out W, as Keras draws
//! a [T, W] kernel) is added to every example: y = x + P, broadcast over
//! the batch. T is the input's length: a model for contexts of T positions.
//!   strata::nn::Sequential model{strata::nn::Input{{64}}, strata::nn::Embedding{96, 128},
//!                                strata::nn::PositionEmbedding{}, ...};

#include <string>

#include <strata/core/error.hpp>
#include <strata/nn/layers/activation.hpp>
#include <strata/nn/layers/layer.hpp>

namespace strata::nn {

class PositionEmbedding final : public detail::LayerBase<PositionEmbedding> {
 public:
  PositionEmbedding() = default;

  [[nodiscard]] std::string kind() const override { return "PositionEmbedding"; }

  Shape build(const Shape& input) override {
    if (input.rank() != 2 || input[0] == 0 || input[1] == 0)
      throw ShapeError("PositionEmbedding: expects per-sample [T, W] vectors by position (an Embedding's output), "
                       "got per-sample shape " + input.str());
    shape_ = input;
    return input;
  }
  [[nodiscard]] std::vector<ParamSpec> params() const override {
    return {{"embeddings", shape_, Init::GlorotUniform, shape_[0], shape_[1], 0.f}};
  }
  void bind(std::span<const ParamRef> p) override { table_ = p[0]; }

  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo&) override {
    detail::check_input(kind(), shape_, x);
    const std::size_t b = x.shape()[0];
    detail::resize(c, y, b, shape_);
    // every example is one row of T * W, the table its bias
    if (b) c.bias_activate(Activation::Linear, x.data(), table_.value.data(), y.data(), b, shape_.elements());
  }

  void backward(Compute& c, const Act& x, const Act&, const Act& dy, Act* dx) override {
    const std::size_t b = x.shape()[0];
    c.column_sums(dy.data(), table_.grad.data(), b, shape_.elements());
    if (dx) {
      detail::resize(c, *dx, b, shape_);
      c.copy(dx->data(), dy.data(), dy.size() * sizeof(float));
    }
  }

 private:
  Shape shape_;
  ParamRef table_;
};

}  // namespace strata::nn
