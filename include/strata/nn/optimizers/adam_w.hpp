#pragma once
//! AdamW (Loshchilov & Hutter): Adam whose weight decay is applied to the
//! weights, not added to the gradient, as PyTorch's torch.optim.AdamW and
//! Keras' AdamW:
//!   w *= 1 - lr * weight_decay;   then Adam's update (nn/optimizers/adam.hpp, Keras' form)
//! `lr` is the schedule's rate of the step (overrides included). Every
//! parameter is decayed, biases and normalization scales included
//! (strata's optimizers see one flat vector). weight_decay defaults to
//! 0.01, PyTorch's (Keras': 0.004); 0 gives Adam's bits exactly. One pass
//! of Compute::adamw, host and GPU, elementwise: sharded updates, same bits.
//!   strata::nn::AdamW{1e-3};
//!   strata::nn::AdamW{strata::nn::CosineDecay{.initial = 0.f, .decay_steps = 900, .warmup_target = 3e-4f,
//!                                             .warmup_steps = 100}, {.weight_decay = 0.1f, .global_clipnorm = 1.f}};

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include <strata/nn/optimizers/optimizer.hpp>

namespace strata::nn {

struct AdamWOptions {
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  float weight_decay = 0.01f;   //!< the decoupled decay's rate (PyTorch's default)
  float global_clipnorm = 0.f;  //!< clip each step's gradient to this global norm (0: off; Optimizer::global_clipnorm)
};

class AdamW final : public Optimizer {
 public:
  explicit AdamW(LearningRate lr = 1e-3, AdamWOptions o = {}) : lr_(std::move(lr)), o_(o) {
    if (!(o_.beta_1 >= 0.f && o_.beta_1 < 1.f && o_.beta_2 >= 0.f && o_.beta_2 < 1.f))
      throw Error("AdamW: beta_1 and beta_2 must be in [0, 1)");
    if (!(std::isfinite(o_.weight_decay) && o_.weight_decay >= 0.f))
      throw Error("AdamW: weight_decay must be finite and >= 0, got " + std::to_string(o_.weight_decay));
    set_global_clipnorm(o_.global_clipnorm);
  }
  [[nodiscard]] std::string name() const override { return "AdamW"; }
  [[nodiscard]] std::size_t slot_count() const noexcept override { return 2; }
  [[nodiscard]] std::string describe() const override {
    return "AdamW(" + rate_field(lr_) + ", " + field("beta_1", o_.beta_1) + ", " +
           field("beta_2", o_.beta_2) + ", " + field("epsilon", o_.epsilon) + ", " +
           field("weight_decay", o_.weight_decay) + clip_field() + ")";
  }
  [[nodiscard]] std::unique_ptr<Optimizer> clone() const override { return clone_of(*this, lr_); }
  [[nodiscard]] LearningRate* learning_rate() noexcept override { return &lr_; }

  //! The rate with Adam's bias correction for step `step` folded in (Adam::step_rate).
  [[nodiscard]] float step_rate(std::int64_t step) const override {
    const double t = static_cast<double>(step + 1);
    return static_cast<float>(lr_(step) * std::sqrt(1.0 - std::pow(static_cast<double>(o_.beta_2), t)) /
                              (1.0 - std::pow(static_cast<double>(o_.beta_1), t)));
  }
  //! The factor step `step` multiplies the weights by: 1 - lr * weight_decay (1 for no decay).
  [[nodiscard]] float decay(std::int64_t step) const {
    return static_cast<float>(1.0 - static_cast<double>(lr_(step)) * static_cast<double>(o_.weight_decay));
  }

 protected:
  void update(kernels::Compute& c, std::span<float> w, std::span<const float> g, OptimizerState& s,
              std::size_t offset, std::int64_t step) const override {
    const float lr_t = step_rate(step), d = decay(step);
    if (w.empty()) return;
    c.adamw(w.data(), g.data(), slot(s, 0, offset), slot(s, 1, offset), w.size(),
            kernels::AdamWStep{adam_step(lr_t), d, nullptr});
  }
  void update_at(kernels::Compute& c, std::span<float> w, std::span<const float> g, OptimizerState& s,
                 std::size_t offset, const kernels::DeviceStep& d) const override {
    if (!s.table) throw Error("AdamW in a captured step: its decays were not written (Optimizer::prepare_steps)");
    if (w.empty()) return;
    c.adamw_at(w.data(), g.data(), slot(s, 0, offset), slot(s, 1, offset), w.size(),
               kernels::AdamWStep{adam_step(0.f), 1.f, s.table.get()}, d);
  }
  //! The decays of iterations step, step + 1, ... (as many as the table holds) in the state's memory.
  void prepare_at(kernels::Compute& c, OptimizerState& s, std::int64_t step, std::size_t count) const override {
    using kernels::RateTable;
    if (!s.table) {
      auto* p = static_cast<RateTable*>(c.allocate(sizeof(RateTable)));
      s.table = std::shared_ptr<RateTable>(p, [&c](RateTable* q) { c.deallocate(q, sizeof(RateTable)); });
    }
    auto host = std::make_unique<RateTable>();
    host->base = static_cast<std::uint64_t>(step);
    host->count = std::max<std::size_t>(1, std::min(count, RateTable::capacity));
    for (std::size_t k = 0; k < host->count; ++k) host->rate[k] = decay(step + static_cast<std::int64_t>(k));
    c.upload(s.table.get(), host.get(), sizeof(RateTable));
  }

 private:
  [[nodiscard]] kernels::AdamStep adam_step(float lr_t) const {
    return kernels::AdamStep{lr_t, o_.beta_1, o_.beta_2, o_.epsilon};
  }

  LearningRate lr_;
  AdamWOptions o_;
};

}  // namespace strata::nn
