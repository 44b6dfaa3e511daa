#pragma once
//! SyncPolicy: when replicas' updates take effect. Synchronous: every
//! replica applies the same reduced update each step. Asynchronous: each
//! worker's gradients are applied as they arrive (parameter servers), with a
//! staleness bound chosen at run time (ParameterServerOptions::staleness).

#include <concepts>
#include <string_view>

namespace strata {

//! All replicas take each step together, with the same reduced gradients.
struct Synchronous {
  using sync_policy = Synchronous;
  static constexpr std::string_view name = "synchronous";
};

//! Workers push gradients that servers apply as they arrive; a worker may run
//! at most k steps ahead of the slowest (k = 0: synchronous rounds; no k:
//! fully asynchronous).
struct Asynchronous {
  using sync_policy = Asynchronous;
  static constexpr std::string_view name = "asynchronous";
};

//! A type that opts into being a sync policy (`using sync_policy = Self;`).
template <class S>
concept SyncPolicy = std::same_as<typename S::sync_policy, S>;

}  // namespace strata
