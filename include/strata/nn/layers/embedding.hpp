#pragma once
//! Embedding: token ids to vectors, as Keras' Embedding. The input is
//! [batch, T] token ids stored as floats (strata's features and labels are
//! float tensors); the output [batch, T, width] holds row `id` of the table
//! [vocab, width] at each position. The table starts uniform in
//! [-0.05, 0.05), Keras' default (seeded by the model as every parameter).
//! An id that is not an integer in [0, vocab) is an Error naming its
//! example and position on the host; on a GPU its row is NaN, so the loss
//! is NaN and fit's non-finite check reports the step (kernels/compute.hpp).
//! The table's gradient sums each token's positions in order: the same bits
//! in every space (no atomics). Ids are not differentiable: a model never
//! asks this layer for dx (it is a model's first layer), and asking throws.
//!   strata::nn::Sequential model{strata::nn::Input{{64}}, strata::nn::Embedding{96, 128}, ...};

#include <string>

#include <strata/core/error.hpp>
#include <strata/nn/layers/layer.hpp>

namespace strata::nn {

class Embedding final : public detail::LayerBase<Embedding> {
 public:
  //! The uniform initializer's half-width (Keras' RandomUniform(-0.05, 0.05)).
  static constexpr float init_limit = 0.05f;

  Embedding(std::size_t vocab, std::size_t width) : vocab_(vocab), width_(width) {
    if (vocab == 0) throw Error("Embedding: the vocabulary needs at least one token (vocab = 0)");
    if (width == 0) throw Error("Embedding: the width of a token's vector must be at least 1");
  }

  [[nodiscard]] std::string kind() const override { return "Embedding"; }
  [[nodiscard]] std::size_t vocab() const noexcept { return vocab_; }
  [[nodiscard]] std::size_t width() const noexcept { return width_; }

  Shape build(const Shape& input) override {
    if (input.rank() != 1)
      throw ShapeError("Embedding: expects a per-sample sequence of token ids [T], got per-sample shape " +
                       input.str());
    steps_ = input[0];
    return Shape{steps_, width_};
  }
  //! The table, "embeddings" [vocab, width]: uniform in +-init_limit. It is
  //! drawn by the model's GlorotUniform draw with fan_in + fan_out =
  //! 6 / init_limit^2 = 2400, whose limit sqrt(6 / 2400) is exactly that.
  [[nodiscard]] std::vector<ParamSpec> params() const override {
    return {{"embeddings", Shape{vocab_, width_}, Init::GlorotUniform, 1200, 1200, 0.f}};
  }
  void bind(std::span<const ParamRef> p) override { table_ = p[0]; }

  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo&) override {
    detail::check_input(kind(), Shape{steps_}, x);
    const std::size_t b = x.shape()[0];
    detail::resize(c, y, b, Shape{steps_, width_});
    if (b && steps_) c.embedding(table_.value.data(), x.data(), y.data(), b, steps_, vocab_, width_);
  }

  void backward(Compute& c, const Act& x, const Act&, const Act& dy, Act* dx) override {
    if (dx)
      throw Error("Embedding: token ids are not differentiable, so it has no dL/dx; put it first in the model "
                  "(the model then never asks for it)");
    c.embedding_backward(x.data(), dy.data(), table_.grad.data(), x.size(), vocab_, width_);
  }

 private:
  std::size_t vocab_, width_;
  std::size_t steps_ = 0;
  ParamRef table_;
};

}  // namespace strata::nn
