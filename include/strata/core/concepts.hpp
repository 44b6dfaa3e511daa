#pragma once
//! Small concepts and compile-time helpers shared by every layer.

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace strata {

//! Element types a tensor and a collective accept.
template <class T>
concept Element = std::same_as<T, float> || std::same_as<T, double> ||
                  std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

//! The name of an element type as it appears in error messages.
template <Element T>
constexpr std::string_view dtype_name() noexcept {
  if constexpr (std::same_as<T, float>) return "float32";
  else if constexpr (std::same_as<T, double>) return "float64";
  else if constexpr (std::same_as<T, std::int32_t>) return "int32";
  else return "int64";
}

namespace detail {
//! `static_assert(dependent_false<T>, "...")` in a discarded branch fires only
//! when that branch is instantiated: the way each dispatch point states, as a
//! sentence, which combination is invalid and what to use instead.
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace detail

}  // namespace strata
