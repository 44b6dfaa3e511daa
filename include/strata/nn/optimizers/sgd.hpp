#pragma once
//! Stochastic gradient descent, optionally with (Nesterov) momentum, as Keras:
//! v = momentum * v - lr * g;  w += v            (classical)
//! w += momentum * v - lr * g  (after updating v) (Nesterov)
//!   strata::nn::SGD{0.01};   strata::nn::SGD{0.1, {.momentum = 0.9f, .nesterov = true}};

#include <strata/nn/optimizers/optimizer.hpp>

namespace strata::nn {

struct SGDOptions {
  float momentum = 0.f;
  bool nesterov = false;
  float global_clipnorm = 0.f;  //!< clip each step's gradient to this global norm (0: off; Optimizer::global_clipnorm)
};

class SGD final : public Optimizer {
 public:
  explicit SGD(LearningRate lr = 0.01, SGDOptions o = {}) : lr_(std::move(lr)), o_(o) {
    if (o_.momentum < 0.f || o_.momentum >= 1.f) throw Error("SGD: momentum must be in [0, 1)");
    if (o_.nesterov && o_.momentum == 0.f) throw Error("SGD: Nesterov needs a momentum > 0");
    set_global_clipnorm(o_.global_clipnorm);
  }
  [[nodiscard]] std::string name() const override { return "SGD"; }
  [[nodiscard]] std::size_t slot_count() const noexcept override { return o_.momentum > 0.f ? 1 : 0; }
  [[nodiscard]] std::string describe() const override {
    return "SGD(" + rate_field(lr_) + ", " + field("momentum", o_.momentum) +
           ", nesterov=" + (o_.nesterov ? "1" : "0") + clip_field() + ")";
  }
  [[nodiscard]] std::unique_ptr<Optimizer> clone() const override { return clone_of(*this, lr_); }
  [[nodiscard]] LearningRate* learning_rate() noexcept override { return &lr_; }

 protected:
  void update(kernels::Compute& c, std::span<float> w, std::span<const float> g, OptimizerState& s,
              std::size_t offset, std::int64_t step) const override {
    if (w.empty()) return;
    c.sgd(w.data(), g.data(), o_.momentum == 0.f ? nullptr : slot(s, 0, offset), w.size(),
          kernels::SgdStep{lr_(step), o_.momentum, o_.nesterov});
  }
  void update_at(kernels::Compute& c, std::span<float> w, std::span<const float> g, OptimizerState& s,
                 std::size_t offset, const kernels::DeviceStep& d) const override {
    if (w.empty()) return;
    c.sgd_at(w.data(), g.data(), o_.momentum == 0.f ? nullptr : slot(s, 0, offset), w.size(),
             kernels::SgdStep{0.f, o_.momentum, o_.nesterov}, d);
  }

 public:
  [[nodiscard]] float step_rate(std::int64_t step) const override { return lr_(step); }

 private:
  LearningRate lr_;
  SGDOptions o_;
};

}  // namespace strata::nn
