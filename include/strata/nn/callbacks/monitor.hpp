#pragma once
//! What the Keras callbacks share: a monitored value of the epoch logs and
//! whether it improved (mode "min", "max", or "auto": max for names with
//! "acc" in them, as Keras), and exact text forms of their state.
//!   detail::Monitor m{"val_loss", Mode::Auto, 1e-3};  if (m.improved(logs.at("val_loss"), best)) ...

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/callbacks/callbacks.hpp>

namespace strata::nn {

//! Which way a monitored value improves.
enum class Mode { Auto, Min, Max };

namespace detail {

struct Monitor {
  std::string name;
  bool max = false;
  double min_delta = 0.0;

  Monitor(std::string monitor, Mode mode, double delta, const char* who) : name(std::move(monitor)) {
    if (name.empty()) throw Error(std::string(who) + ": monitor names no value");
    if (!(delta >= 0.0)) throw Error(std::string(who) + ": min_delta must be >= 0");
    max = mode == Mode::Max || (mode == Mode::Auto && name.find("acc") != std::string::npos);
    min_delta = delta;
  }
  //! Whether `current` beats `reference` by more than min_delta (always, without a reference).
  [[nodiscard]] bool improved(double current, const std::optional<double>& reference) const {
    if (!reference) return !std::isnan(current);
    return max ? current - min_delta > *reference : current + min_delta < *reference;
  }
  //! The value in `logs`; an Error naming the values there when it is missing.
  [[nodiscard]] double value(const Logs& logs, const char* who) const {
    if (!logs.contains(name)) {
      std::string have;
      for (const auto& kv : logs.items()) have += (have.empty() ? "" : ", ") + kv.first;
      throw Error(std::string(who) + ": the epoch's logs have no \"" + name + "\" to monitor (they have: " + have +
                  ")" + (name.starts_with("val_") ? "; val_* values need validation data given to fit" : ""));
    }
    return logs.at(name);
  }
};

//! A double as text that reads back as the same bits ("inf", "nan" too).
inline std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
//! A value as a CSV shows it: the shortest text that reads back as the same double.
inline std::string exact_short(double v) {
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v || std::isnan(v)) break;
  }
  return buf;
}
inline double parse_exact(const std::string& s) { return std::strtod(s.c_str(), nullptr); }

//! Floats as hex of their bits (8 characters each).
inline std::string hex_floats(const std::vector<io::NamedTensor>& ws) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const auto& w : ws)
    for (float f : w.value) {
      const auto b = std::bit_cast<std::uint32_t>(f);
      for (int s = 28; s >= 0; s -= 4) out += digits[(b >> s) & 15u];
    }
  return out;
}
//! Fills `ws` (the model's names and shapes) from hex_floats' text; false when the sizes differ.
inline bool unhex_floats(const std::string& hex, std::vector<io::NamedTensor>& ws) {
  std::size_t n = 0;
  for (const auto& w : ws) n += w.value.size();
  if (hex.size() != 8 * n) return false;
  std::size_t at = 0;
  for (auto& w : ws)
    for (float& f : w.value) {
      std::uint32_t b = 0;
      for (int k = 0; k < 8; ++k) {
        const char c = hex[at++];
        b = b << 4 | static_cast<std::uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
      }
      f = std::bit_cast<float>(b);
    }
  return true;
}

//! The value of `key` in a callback's state, if there.
inline const std::string* find_state(const CallbackState& s, const std::string& key) {
  for (const auto& [k, v] : s)
    if (k == key) return &v;
  return nullptr;
}
inline std::optional<double> optional_state(const CallbackState& s, const std::string& key) {
  std::optional<double> out;
  if (const std::string* v = find_state(s, key)) out.emplace(parse_exact(*v));
  return out;
}

}  // namespace detail
}  // namespace strata::nn
