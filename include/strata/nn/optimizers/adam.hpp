#pragma once
//! Adam (Kingma & Ba), in Keras' form: the bias correction folded into the
//! step size, epsilon added to sqrt(v). The whole update is one pass of the
//! compute vocabulary (Compute::adam): one kernel over all parameters on a GPU.
//!   strata::nn::Adam{1e-3};   strata::nn::Adam{1e-3, {.beta_1 = 0.9f, .beta_2 = 0.999f, .epsilon = 1e-7f}};
//!   strata::nn::Adam{1e-3, {.global_clipnorm = 1.f}};   // clipped by the global norm

#include <cmath>

#include <strata/nn/optimizers/optimizer.hpp>

namespace strata::nn {

struct AdamOptions {
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  float global_clipnorm = 0.f;  //!< clip each step's gradient to this global norm (0: off; Optimizer::global_clipnorm)
};

class Adam final : public Optimizer {
 public:
  explicit Adam(LearningRate lr = 1e-3, AdamOptions o = {}) : lr_(std::move(lr)), o_(o) {
    if (!(o_.beta_1 >= 0.f && o_.beta_1 < 1.f && o_.beta_2 >= 0.f && o_.beta_2 < 1.f))
      throw Error("Adam: beta_1 and beta_2 must be in [0, 1)");
    set_global_clipnorm(o_.global_clipnorm);
  }
  [[nodiscard]] std::string name() const override { return "Adam"; }
  [[nodiscard]] std::size_t slot_count() const noexcept override { return 2; }
  [[nodiscard]] std::string describe() const override {
    return "Adam(" + rate_field(lr_) + ", " + field("beta_1", o_.beta_1) + ", " +
           field("beta_2", o_.beta_2) + ", " + field("epsilon", o_.epsilon) + clip_field() + ")";
  }
  [[nodiscard]] std::unique_ptr<Optimizer> clone() const override { return clone_of(*this, lr_); }
  [[nodiscard]] LearningRate* learning_rate() noexcept override { return &lr_; }

 protected:
  void update(kernels::Compute& c, std::span<float> w, std::span<const float> g, OptimizerState& s,
              std::size_t offset, std::int64_t step) const override {
    const float lr_t = step_rate(step);
    if (w.empty()) return;
    c.adam(w.data(), g.data(), slot(s, 0, offset), slot(s, 1, offset), w.size(),
           kernels::AdamStep{lr_t, o_.beta_1, o_.beta_2, o_.epsilon});
  }
  void update_at(kernels::Compute& c, std::span<float> w, std::span<const float> g, OptimizerState& s,
                 std::size_t offset, const kernels::DeviceStep& d) const override {
    if (w.empty()) return;
    c.adam_at(w.data(), g.data(), slot(s, 0, offset), slot(s, 1, offset), w.size(),
              kernels::AdamStep{0.f, o_.beta_1, o_.beta_2, o_.epsilon}, d);
  }

 public:
  //! The rate with Adam's bias correction for step `step` folded in.
  [[nodiscard]] float step_rate(std::int64_t step) const override {
    const double t = static_cast<double>(step + 1);
    return static_cast<float>(lr_(step) * std::sqrt(1.0 - std::pow(static_cast<double>(o_.beta_2), t)) /
                              (1.0 - std::pow(static_cast<double>(o_.beta_1), t)));
  }

 private:
  LearningRate lr_;
  AdamOptions o_;
};

}  // namespace strata::nn
