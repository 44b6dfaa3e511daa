#pragma once
//! A learning rate: a constant, or a schedule of the step (as Keras'
//! LearningRateSchedule). Schedules are plain callables `float(int64 step)`.
//! A rate set at run time (set_override: ReduceLROnPlateau,
//! LearningRateScheduler) replaces the schedule's value from the next step
//! on, in every copy of the optimizer an executor cloned (clones share it
//! through share_override_of; a plain copy gets a state of its own).
//!   strata::nn::Adam{1e-3};
//!   strata::nn::SGD{strata::nn::ExponentialDecay{0.1f, 1000, 0.96f}};
//!   strata::nn::AdamW{strata::nn::CosineDecay{.initial = 0.f, .decay_steps = 900, .warmup_target = 1e-3f, .warmup_steps = 100}};

#include <algorithm>
#include <atomic>
#include <cmath>
#include <concepts>
#include <limits>
#include <memory>
#include <optional>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <strata/core/error.hpp>

namespace strata::nn {

class LearningRate {
 public:
  LearningRate(double value) : fn_([v = static_cast<float>(value)](std::int64_t) { return v; }) {}  // NOLINT: implicit on purpose
  template <class F>
    requires(std::is_invocable_r_v<float, F&, std::int64_t> && !std::is_arithmetic_v<F> &&
             !std::same_as<std::remove_cvref_t<F>, LearningRate>)
  LearningRate(F schedule) : fn_(std::move(schedule)) {}  // NOLINT
  //! A copy has an override of its own (starting from this one's): two
  //! models compiled with copies of one optimizer do not share it.
  LearningRate(const LearningRate& o) : fn_(o.fn_), override_(std::make_shared<Override>(o.override_->load())) {}
  LearningRate& operator=(const LearningRate& o) {
    if (this != &o) fn_ = o.fn_, override_ = std::make_shared<Override>(o.override_->load());
    return *this;
  }
  LearningRate(LearningRate&&) noexcept = default;
  LearningRate& operator=(LearningRate&&) noexcept = default;

  //! The rate at `step` (0 for the first update): the override when one is set, else the schedule's.
  [[nodiscard]] float operator()(std::int64_t step) const {
    const float o = override_->load(std::memory_order_relaxed);
    return std::isnan(o) ? fn_(step) : o;
  }
  //! The schedule's rate at `step`, whatever the override (what Optimizer::describe shows).
  [[nodiscard]] float scheduled(std::int64_t step) const { return fn_(step); }
  //! The rate set at run time, if any.
  [[nodiscard]] std::optional<float> override_rate() const {
    std::optional<float> out;
    if (const float o = override_->load(); !std::isnan(o)) out.emplace(o);
    return out;
  }
  //! Sets (a finite rate >= 0) or clears (nullopt) the run-time rate, for
  //! every copy sharing it; read by the next step (between steps: fit's callbacks).
  void set_override(std::optional<float> rate) const {
    if (rate && !(std::isfinite(*rate) && *rate >= 0.f))
      throw Error("LearningRate: a learning rate must be finite and >= 0, got " + std::to_string(*rate));
    override_->store(rate ? *rate : std::numeric_limits<float>::quiet_NaN());
  }
  //! This rate shares `o`'s override from now on (Optimizer::clone: the executors' copies).
  void share_override_of(const LearningRate& o) { override_ = o.override_; }

 private:
  using Override = std::atomic<float>;  // NaN: none
  std::function<float(std::int64_t)> fn_;
  std::shared_ptr<Override> override_ = std::make_shared<Override>(std::numeric_limits<float>::quiet_NaN());
};

//! initial * rate^(step / decay_steps), the exponent floored when `staircase`.
struct ExponentialDecay {
  float initial;
  std::int64_t decay_steps;
  float decay_rate;
  bool staircase = false;
  float operator()(std::int64_t step) const {
    if (decay_steps <= 0) throw Error("ExponentialDecay: decay_steps must be positive");
    double e = static_cast<double>(step) / static_cast<double>(decay_steps);
    if (staircase) e = std::floor(e);
    return static_cast<float>(initial * std::pow(static_cast<double>(decay_rate), e));
  }
};

//! values[i] while step <= boundaries[i] (and values.back() after the last boundary).
struct PiecewiseConstantDecay {
  std::vector<std::int64_t> boundaries;
  std::vector<float> values;
  float operator()(std::int64_t step) const {
    if (values.size() != boundaries.size() + 1)
      throw Error("PiecewiseConstantDecay: needs one more value than boundaries, got " +
                  std::to_string(values.size()) + " values for " + std::to_string(boundaries.size()) + " boundaries");
    std::size_t i = 0;
    while (i < boundaries.size() && step > boundaries[i]) ++i;
    return values[i];
  }
};

//! Cosine decay with an optional linear warm-up, as Keras' CosineDecay:
//! without warm-up, initial * f(step / decay_steps); with one
//! (warmup_target set), the rate goes linearly from `initial` at step 0 to
//! warmup_target at step warmup_steps, then warmup_target * f((step -
//! warmup_steps) / decay_steps); f(x) = (1 - alpha) * (1 + cos(pi * x)) / 2
//! + alpha, so the rate ends at alpha times its peak and stays there past
//! the end. Computed in double, rounded once. Step 0 is the first update.
//!   strata::nn::AdamW{strata::nn::CosineDecay{.initial = 0.f, .decay_steps = 900, .alpha = 0.1f,
//!                                             .warmup_target = 1e-3f, .warmup_steps = 100}};
struct CosineDecay {
  float initial;
  std::int64_t decay_steps;
  float alpha = 0.f;                  //!< the floor, a fraction of the peak rate
  std::optional<float> warmup_target = std::nullopt;  //!< the peak rate the warm-up reaches (none: no warm-up, the peak is `initial`)
  std::int64_t warmup_steps = 0;
  float operator()(std::int64_t step) const {
    if (decay_steps <= 0) throw Error("CosineDecay: decay_steps must be positive, got " + std::to_string(decay_steps));
    if (warmup_steps < 0) throw Error("CosineDecay: warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
    if (warmup_steps > 0 && !warmup_target)
      throw Error("CosineDecay: warmup_steps = " + std::to_string(warmup_steps) +
                  " needs a warmup_target (the rate the warm-up reaches)");
    const double s = static_cast<double>(std::min(step < 0 ? 0 : step, decay_steps + warmup_steps));
    const double w = static_cast<double>(warmup_steps);
    const double start = initial, peak = warmup_target ? *warmup_target : initial;
    if (s < w) return static_cast<float>((peak - start) * (s / w) + start);
    constexpr double pi = 3.14159265358979323846;
    const double cosine = 0.5 * (1.0 + std::cos(pi * (s - w) / static_cast<double>(decay_steps)));
    const double a = alpha;
    return static_cast<float>(peak * ((1.0 - a) * cosine + a));
  }
};

}  // namespace strata::nn
