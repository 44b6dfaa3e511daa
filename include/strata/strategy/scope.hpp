#pragma once
//! The strategy scope: which strategy code on this thread runs under, so
//! that model-building code can ask without being handed the strategy.

#include <optional>
#include <string_view>

#include <strata/strategy/any_strategy.hpp>

namespace strata {

//! What code inside `strategy.scope(fn)` can learn about its strategy.
struct ScopeInfo {
  std::string_view placement;
  int num_replicas = 1;
  AnyStrategy* strategy = nullptr;  //!< the strategy itself, type-erased
};

namespace detail {
inline std::optional<ScopeInfo>& scope_slot() {
  thread_local std::optional<ScopeInfo> s;
  return s;
}
struct ScopeGuard {
  explicit ScopeGuard(ScopeInfo info) : saved(scope_slot()) { scope_slot() = info; }
  ~ScopeGuard() { scope_slot() = saved; }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  std::optional<ScopeInfo> saved;
};
}  // namespace detail

//! The innermost strategy scope entered on this thread, if any.
inline std::optional<ScopeInfo> current_scope() { return detail::scope_slot(); }

}  // namespace strata
