#pragma once
//! PerReplica<T>: one value per replica, as returned by Strategy::run.

#include <cstddef>
#include <utility>
#include <vector>

namespace strata {

//! The values a function returned on each replica, indexed by replica id.
//!   auto losses = strategy.run(step);   float total = strategy.reduce(strata::Sum, losses);
template <class T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}

  [[nodiscard]] std::size_t size() const noexcept { return values_.size(); }
  [[nodiscard]] const T& operator[](std::size_t r) const { return values_.at(r); }
  [[nodiscard]] T& operator[](std::size_t r) { return values_.at(r); }
  [[nodiscard]] const std::vector<T>& values() const noexcept { return values_; }
  [[nodiscard]] auto begin() const noexcept { return values_.begin(); }
  [[nodiscard]] auto end() const noexcept { return values_.end(); }

 private:
  std::vector<T> values_;
};

}  // namespace strata
