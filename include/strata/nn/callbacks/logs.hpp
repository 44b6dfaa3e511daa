#pragma once
//! Named values reported by fit/evaluate ("loss", "accuracy", "val_loss", ...), in display order.
//!   auto logs = model.evaluate(test);   double acc = logs.at("accuracy");

#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>

namespace strata::nn {

class Logs {
 public:
  void set(const std::string& name, double value) {
    for (auto& [k, v] : items_)
      if (k == name) {
        v = value;
        return;
      }
    items_.emplace_back(name, value);
  }
  [[nodiscard]] bool contains(const std::string& name) const {
    for (const auto& kv : items_)
      if (kv.first == name) return true;
    return false;
  }
  [[nodiscard]] double at(const std::string& name) const {
    for (const auto& [k, v] : items_)
      if (k == name) return v;
    std::string known;
    for (const auto& kv : items_) known += (known.empty() ? "" : ", ") + kv.first;
    throw Error("Logs: no value named \"" + name + "\" (have: " + known + ")");
  }
  [[nodiscard]] const std::vector<std::pair<std::string, double>>& items() const noexcept { return items_; }

 private:
  std::vector<std::pair<std::string, double>> items_;
};

//! Per-epoch logs of a fit, as Keras' History: history.at("loss")[epoch].
class History {
 public:
  void append(const Logs& logs) {
    epochs_.push_back(logs);
  }
  [[nodiscard]] std::vector<double> at(const std::string& name) const {
    std::vector<double> out;
    for (const auto& e : epochs_) out.push_back(e.at(name));
    return out;
  }
  [[nodiscard]] const std::vector<Logs>& epochs() const noexcept { return epochs_; }

 private:
  std::vector<Logs> epochs_;
};

}  // namespace strata::nn
