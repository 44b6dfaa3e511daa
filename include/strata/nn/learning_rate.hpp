#pragma once
//! A learning rate: a constant, or a schedule of the step (as Keras'
//! LearningRateSchedule). Schedules are plain callables `float(int64 step)`.
//!   strata::nn::Adam{1e-3};
//!   strata::nn::SGD{strata::nn::ExponentialDecay{0.1f, 1000, 0.96f}};

#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <vector>

#include <strata/core/error.hpp>

namespace strata::nn {

class LearningRate {
 public:
  LearningRate(double value) : fn_([v = static_cast<float>(value)](std::int64_t) { return v; }) {}  // NOLINT: implicit on purpose
  template <class F>
    requires(std::is_invocable_r_v<float, F&, std::int64_t> && !std::is_arithmetic_v<F>)
  LearningRate(F schedule) : fn_(std::move(schedule)) {}  // NOLINT
  //! The rate at `step` (0 for the first update).
  [[nodiscard]] float operator()(std::int64_t step) const { return fn_(step); }

 private:
  std::function<float(std::int64_t)> fn_;
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
