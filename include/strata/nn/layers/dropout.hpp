#pragma once
//! Dropout: while training, zeroes each activation with probability `rate`
//! and scales the kept ones by 1 / (1 - rate) (inverted dropout), so that
//! inference is the identity and needs no rescaling.
//!   strata::nn::Dropout drop(0.5f);
//! In a Sequential, RunInfo::layer (the layer's index) is part of the key,
//! so two Dropout layers of one model draw different masks without salts.

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/layers/layer.hpp>
#include <strata/nn/layers/random.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::nn {

//! An inverted-dropout layer of any per-sample shape; no parameters.
//! The mask is a pure function of (RunInfo::seed, RunInfo::replica,
//! RunInfo::step, RunInfo::layer, salt) and the element's position in the batch: replicas
//! draw independent masks, and a step replays exactly whatever the thread
//! scheduling, because no generator state is carried between calls.
//!   strata::nn::Dropout drop(0.25f, /*salt=*/7);
//!   drop.forward(x, y, {.training = true, .replica = 1, .seed = 42, .step = 10});
class Dropout : public detail::LayerBase<Dropout> {
 public:
  //! Drops a fraction `rate` in [0, 1) of the activations; `salt` tells
  //! apart the masks of several Dropout layers of one model.
  //!   strata::nn::Dropout drop(0.5f);
  //!   strata::nn::Dropout second(0.5f, 1);
  explicit Dropout(float rate, std::uint64_t salt = 0) : rate_(rate), salt_(salt) {
    if (!(rate >= 0.f && rate < 1.f))
      throw Error("Dropout: the rate is the fraction of activations dropped and must lie in [0, 1), got " +
                  std::to_string(rate));
  }

  [[nodiscard]] std::string kind() const override { return "Dropout"; }

  //! The fraction of activations dropped while training.
  //!   float r = drop.rate();
  //!   float scale = 1.f / (1.f - r);   // what kept activations are multiplied by
  [[nodiscard]] float rate() const noexcept { return rate_; }

  //! The per-layer part of the mask's key.
  //!   drop.set_salt(2);
  //!   std::uint64_t s = drop.salt();
  [[nodiscard]] std::uint64_t salt() const noexcept { return salt_; }
  //! Sets an extra part of the mask's key (standalone layers; inside a Sequential the layer index already tells Dropout layers apart).
  //!   strata::nn::Dropout drop(0.5f);
  //!   drop.set_salt(4);
  void set_salt(std::uint64_t salt) noexcept { salt_ = salt; }

  Shape build(const Shape& input) override {
    in_ = input;
    built_ = true;
    masked_ = false;
    mask_ = {};
    return input;
  }

  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo& info) override {
    if (!built_) throw Error(describe() + "::forward: call build(input shape) first");
    detail::check_input(describe(), in_, x);
    detail::resize(c, y, x.shape()[0], in_);
    masked_ = info.training && rate_ > 0.f;
    if (!masked_) {
      c.copy(y.data(), x.data(), x.size() * sizeof(float));
      return;
    }
    mask_.resize(c, x.shape());
    if (x.size() && info.counters)  // a capturable step: the iteration read where the replay finds it
      c.dropout_at(x.data(), y.data(), mask_.data(), x.size(),
                   detail::mix(info.seed, static_cast<std::uint64_t>(info.replica)), info.layer, salt_, info.counters,
                   rate_);
    else if (x.size())
      c.dropout(x.data(), y.data(), mask_.data(), x.size(),
                detail::mix(info.seed, static_cast<std::uint64_t>(info.replica), info.step, info.layer, salt_), rate_);
  }

  void backward(Compute& c, const Act& x, const Act& /*y*/, const Act& dy, Act* dx) override {
    if (!built_) throw Error(describe() + "::backward: call build(input shape) first");
    detail::check_input(describe(), in_, x);
    if (dy.shape() != x.shape())
      throw ShapeError(describe() + "::backward: expected dy " + x.shape().str() +
                       " (the shape of the input) but got " + dy.shape().str());
    if (masked_ && mask_.size() != dy.size())
      throw Error(describe() + "::backward: the last training forward pass had " + std::to_string(mask_.size()) +
                  " activations but dy has " + std::to_string(dy.size()) + "; call forward(x, y) first");
    if (dx == nullptr) return;
    detail::resize(c, *dx, x.shape()[0], in_);
    if (!masked_) {
      c.copy(dx->data(), dy.data(), dy.size() * sizeof(float));
      return;
    }
    if (dy.size()) c.multiply(dy.data(), mask_.data(), dx->data(), dy.size());
  }

 private:
  [[nodiscard]] std::string describe() const {
    char rate[32];
    std::snprintf(rate, sizeof rate, "%g", static_cast<double>(rate_));
    return std::string("Dropout(") + rate + ")";
  }

  float rate_;
  std::uint64_t salt_;
  bool built_ = false;
  Shape in_;
  bool masked_ = false;      // whether the last forward applied mask_
  kernels::Scratch<float> mask_;  // 0 or 1 / (1 - rate) per activation of the last training forward
};

}  // namespace strata::nn
