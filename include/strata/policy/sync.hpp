#pragma once
//! SyncPolicy: when replicas' updates take effect. Only Synchronous exists so
//! far (every replica applies the same reduced update each step);
//! asynchronous training arrives with the parameter server.

#include <concepts>
#include <string_view>

namespace strata {

//! All replicas take each step together, with the same reduced gradients.
struct Synchronous {
  using sync_policy = Synchronous;
  static constexpr std::string_view name = "synchronous";
};

//! A type that opts into being a sync policy (`using sync_policy = Self;`).
template <class S>
concept SyncPolicy = std::same_as<typename S::sync_policy, S>;

}  // namespace strata
