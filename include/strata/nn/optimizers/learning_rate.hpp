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
#include <cstdio>
#include <cstdlib>
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

namespace detail {
//! The shortest text that reads back as `v` ("0.001").
inline std::string rate_text(float v) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}
}  // namespace detail

class LearningRate {
 public:
  LearningRate(double value) : fn_([v = static_cast<float>(value)](std::int64_t) { return v; }) {}  // NOLINT: implicit on purpose
  template <class F>
    requires(std::is_invocable_r_v<float, F&, std::int64_t> && !std::is_arithmetic_v<F> &&
             !std::same_as<std::remove_cvref_t<F>, LearningRate>)
  LearningRate(F schedule) : fn_(schedule) {  // NOLINT
    if constexpr (requires(const F& f) { { f.describe() } -> std::convertible_to<std::string>; })
      describe_ = [f = std::move(schedule)] { return f.describe(); };
    else
      describe_ = [fn = fn_] {  // a callable that says nothing of itself: its rates at a few steps
        std::string s = "schedule(";
        const char* sep = "";
        for (std::int64_t step = 1; step <= 1000000; step *= 10) {
          for (const std::int64_t at : step == 1 ? std::vector<std::int64_t>{0, 1} : std::vector<std::int64_t>{step}) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%s%lld: %.9g", sep, static_cast<long long>(at), static_cast<double>(fn(at)));
            s += buf;
            sep = ", ";
          }
        }
        return s + ")";
      };
  }
  //! A copy has an override of its own (starting from this one's): two
  //! models compiled with copies of one optimizer do not share it.
  LearningRate(const LearningRate& o)
      : fn_(o.fn_), describe_(o.describe_), override_(std::make_shared<Override>(o.override_->load())) {}
  LearningRate& operator=(const LearningRate& o) {
    if (this != &o) fn_ = o.fn_, describe_ = o.describe_, override_ = std::make_shared<Override>(o.override_->load());
    return *this;
  }
  LearningRate(LearningRate&&) noexcept = default;
  LearningRate& operator=(LearningRate&&) noexcept = default;

  //! The rate at `step` (0 for the first update): the override when one is set, else the schedule's.
  [[nodiscard]] float operator()(std::int64_t step) const {
    const float o = override_->load(std::memory_order_relaxed);
    return std::isnan(o) ? fn_(step) : o;
  }
  //! The schedule's rate at `step`, whatever the override.
  [[nodiscard]] float scheduled(std::int64_t step) const { return fn_(step); }
  //! Whether the rate is a constant (not a schedule).
  [[nodiscard]] bool is_constant() const noexcept { return !describe_; }
  //! A schedule as text, for a run's fingerprint (Optimizer::describe):
  //! its own describe() ("CosineDecay(initial=0, ..., warmup_target=0.001, ...)"),
  //! else its rates at steps 0, 1, 10, ..., 10^6; a constant: its value.
  [[nodiscard]] std::string describe() const {
    if (describe_) return describe_();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(fn_(0)));
    return buf;
  }
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
  std::function<std::string()> describe_;  // a schedule's (empty: a constant)
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
  [[nodiscard]] std::string describe() const {
    return "ExponentialDecay(initial=" + detail::rate_text(initial) + ", decay_steps=" + std::to_string(decay_steps) +
           ", decay_rate=" + detail::rate_text(decay_rate) + ", staircase=" + (staircase ? "1" : "0") + ")";
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
  [[nodiscard]] std::string describe() const {
    std::string s = "PiecewiseConstantDecay(boundaries=[";
    for (std::size_t i = 0; i < boundaries.size(); ++i) s += (i ? "," : "") + std::to_string(boundaries[i]);
    s += "], values=[";
    for (std::size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + detail::rate_text(values[i]);
    return s + "])";
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
  //! Its parameters: the peak (warmup_target) among them, whatever the rate at step 0.
  [[nodiscard]] std::string describe() const {
    return "CosineDecay(initial=" + detail::rate_text(initial) + ", decay_steps=" + std::to_string(decay_steps) +
           ", alpha=" + detail::rate_text(alpha) +
           (warmup_target ? ", warmup_target=" + detail::rate_text(*warmup_target) : std::string()) +
           ", warmup_steps=" + std::to_string(warmup_steps) + ")";
  }
};

}  // namespace strata::nn
