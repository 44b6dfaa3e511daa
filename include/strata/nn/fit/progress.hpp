#pragma once
//! Keras-style progress for fit: on a terminal, a bar redrawn in place
//!   Epoch 1/5
//!   469/469 [==============================] - 2s 4ms/step - loss: 0.2598 - accuracy: 0.9253 - 131072 samples/s
//! and otherwise (a file, a pipe, CI) one plain line per epoch.

#include <chrono>
#include <concepts>
#include <cstdio>
#include <optional>
#include <string>

#include <unistd.h>

#include <strata/nn/callbacks/logs.hpp>

namespace strata::nn {

//! How much fit and evaluate print.
enum class Verbosity {
  Silent,    //!< nothing
  Auto,      //!< a live bar on a terminal, one line per epoch otherwise
  Bar,       //!< always the live bar
  PerEpoch,  //!< always one line per epoch
};

namespace detail {

inline std::string format_duration(double s) {
  char b[32];
  if (s >= 3600) std::snprintf(b, sizeof b, "%d:%02d:%02d", int(s / 3600), int(s / 60) % 60, int(s) % 60);
  else if (s >= 60) std::snprintf(b, sizeof b, "%d:%02d", int(s / 60), int(s) % 60);
  else std::snprintf(b, sizeof b, "%ds", int(s));
  return b;
}

inline std::string format_logs(const Logs& logs) {
  std::string s;
  char b[64];
  for (const auto& [k, v] : logs.items()) {
    std::snprintf(b, sizeof b, " - %s: %.4f", k.c_str(), v);
    s += b;
  }
  return s;
}

class Progress {
 public:
  //! `done_before`: the steps of this epoch trained before (a resumed
  //! epoch's, by the run stopped): counted in the steps shown, not in the
  //! time per step, whose clock starts now (the samples given are this run's).
  Progress(Verbosity v, std::FILE* out, std::optional<std::size_t> total_steps, std::size_t done_before = 0)
      : out_(out), total_(total_steps), before_(done_before) {
    live_ = v == Verbosity::Bar || (v == Verbosity::Auto && ::isatty(::fileno(out)));
    enabled_ = v != Verbosity::Silent;
    start_ = last_draw_ = std::chrono::steady_clock::now();
  }

  //! Redraws the live bar (at most every 100 ms); `logs()` is called only then.
  template <std::invocable F>
  void update(std::size_t step, std::size_t samples, F&& logs) {
    if (!enabled_ || !live_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100) && (!total_ || step < *total_)) return;
    last_draw_ = now;
    std::fprintf(out_, "\r%s\033[K", line(step, samples, logs(), false).c_str());
    std::fflush(out_);
  }

  void finish(std::size_t steps, std::size_t samples, const Logs& logs) {
    if (!enabled_) return;
    std::fprintf(out_, "%s%s\n", live_ ? "\r\033[K" : "", line(steps, samples, logs, true).c_str());
    std::fflush(out_);
  }

 private:
  std::string line(std::size_t step, std::size_t samples, const Logs& logs, bool done) const {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::string s;
    char b[96];
    if (total_) {
      std::snprintf(b, sizeof b, "%zu/%zu", step, *total_);
      s = b;
      if (live_) {
        const std::size_t width = 30, filled = *total_ ? width * std::min(step, *total_) / *total_ : width;
        s += " [" + std::string(filled, '=') + (filled < width ? ">" + std::string(width - filled - 1, '.') : "") + "]";
      }
    } else {
      std::snprintf(b, sizeof b, "%zu", step);
      s = b;
    }
    const std::size_t here = step > before_ ? step - before_ : 0;  // the steps this run took
    const double per_step = here ? el / static_cast<double>(here) : 0;
    if (!done && total_ && step < *total_)
      s += " - ETA: " + format_duration(per_step * static_cast<double>(*total_ - step));
    else {
      if (per_step >= 1e-3) std::snprintf(b, sizeof b, " - %s %.0fms/step", format_duration(el).c_str(), per_step * 1e3);
      else std::snprintf(b, sizeof b, " - %s %.0fus/step", format_duration(el).c_str(), per_step * 1e6);
      s += b;
    }
    s += format_logs(logs);
    std::snprintf(b, sizeof b, " - %.0f samples/s", el > 0 ? static_cast<double>(samples) / el : 0.0);
    return s + b;
  }

  std::FILE* out_;
  std::optional<std::size_t> total_;
  std::size_t before_ = 0;
  bool live_ = false, enabled_ = true;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace detail
}  // namespace strata::nn
