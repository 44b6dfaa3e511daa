#pragma once
//! A learning rate: a constant, or a schedule of the step (as Keras'
//! LearningRateSchedule). Schedules are plain callables `float(int64 step)`.
//! A rate set at run time (set_override: ReduceLROnPlateau,
//! LearningRateScheduler) replaces the schedule's value from the next step
//! on, in every copy of the optimizer an executor cloned (clones share it
//! through share_override_of; a plain copy gets a state of its own).
//!   strata::nn::Adam{1e-3};
//!   strata::nn::SGD{strata::nn::ExponentialDecay{0.1f, 1000, 0.96f}};

#include <atomic>
#include <cmath>
#include <concepts>
#include <limits>
#include <memory>
#include <optional>
#include <cstdint>
#include <functional>
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

}  // namespace strata::nn
