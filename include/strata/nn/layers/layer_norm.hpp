#pragma once
//! LayerNorm: normalizes each sample over its last axis, then scales and
//! shifts it with learned per-feature parameters:
//!   y = (x - mean) / sqrt(var + epsilon) * (1 + gamma) + beta
//! with the mean and (biased) variance of the sample's last axis. gamma is
//! the scale's offset from 1 and starts at zero, beta starts at zero: a new
//! layer is the plain normalization. The arithmetic is the compute
//! vocabulary's layer_norm (kernels/bodies/layer_norm.hpp, the same bits on
//! the host and on a GPU).
//!   strata::nn::Sequential model{strata::nn::Dense{64}, strata::nn::LayerNorm{}, strata::nn::GELU{}};
//!   strata::nn::LayerNorm norm{{.epsilon = 1e-5f}};

#include <cmath>
#include <string>

#include <strata/core/error.hpp>
#include <strata/nn/layers/layer.hpp>

namespace strata::nn {

struct LayerNormOptions {
  float epsilon = 1e-3f;  //!< added to the variance (Keras' default)
};

class LayerNorm final : public detail::LayerBase<LayerNorm> {
 public:
  explicit LayerNorm(LayerNormOptions opts = {}) : opts_(opts) {
    if (!(opts.epsilon > 0.f) || !std::isfinite(opts.epsilon))
      throw Error("LayerNorm: epsilon keeps the division defined and must be positive and finite, got " +
                  std::to_string(opts.epsilon));
  }

  [[nodiscard]] std::string kind() const override { return "LayerNorm"; }
  [[nodiscard]] float epsilon() const noexcept { return opts_.epsilon; }

  Shape build(const Shape& input) override {
    if (input.rank() == 0 || input.dims().back() == 0)
      throw ShapeError("LayerNorm: needs a non-empty last axis to normalize over, got per-sample shape " +
                       input.str());
    shape_ = input;
    return input;
  }
  [[nodiscard]] std::vector<ParamSpec> params() const override {
    return {{"gamma", Shape{features()}, Init::Zeros, 0, 0, 0.f}, {"beta", Shape{features()}, Init::Zeros, 0, 0, 0.f}};
  }
  void bind(std::span<const ParamRef> p) override {
    gamma_ = p[0];
    beta_ = p[1];
  }

  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo&) override {
    detail::check_input(kind(), shape_, x);
    detail::resize(c, y, x.shape()[0], shape_);
    const std::size_t rows = x.size() / features();
    xhat_.resize(c, x.shape());
    rstd_.resize(c, Shape{rows});
    if (rows) c.layer_norm(x.data(), gamma_.value.data(), beta_.value.data(), y.data(), xhat_.data(), rstd_.data(),
                           rows, features(), opts_.epsilon);
  }

  void backward(Compute& c, const Act& x, const Act&, const Act& dy, Act* dx) override {
    const std::size_t rows = x.size() / features();
    if (xhat_.size() != x.size() || rstd_.size() != rows)
      throw Error("LayerNorm::backward: no forward pass of this batch to take the statistics from; call forward(x, y) "
                  "on this layer (or clone) first");
    if (dx) detail::resize(c, *dx, x.shape()[0], shape_);
    dgamma_rows_.resize(c, x.shape());
    c.layer_norm_backward(dy.data(), xhat_.data(), rstd_.data(), gamma_.value.data(), dx ? dx->data() : nullptr,
                          dgamma_rows_.data(), rows, features());
    c.column_sums(dgamma_rows_.data(), gamma_.grad.data(), rows, features());
    c.column_sums(dy.data(), beta_.grad.data(), rows, features());
  }

 private:
  [[nodiscard]] std::size_t features() const { return shape_.rank() ? shape_.dims().back() : 0; }

  LayerNormOptions opts_;
  Shape shape_;
  ParamRef gamma_, beta_;
  kernels::Scratch<float> xhat_;         // (x - mean) * rstd of the last forward
  kernels::Scratch<float> rstd_;         // 1 / sqrt(var + epsilon) per row of the last forward
  kernels::Scratch<float> dgamma_rows_;  // dy * xhat, summed over the rows into dL/dgamma
};

}  // namespace strata::nn
