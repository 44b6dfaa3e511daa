#pragma once
//! Small concepts and compile-time helpers shared by every layer.

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include <strata/core/half.hpp>

namespace strata {

//! Element types a tensor and a collective accept.
template <class T>
concept Element = std::same_as<T, float> || std::same_as<T, double> ||
                  std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

//! The 16-bit floating-point types (core/half.hpp) that collectives carry
//! and sum in FP32, for gradient compression; not tensor elements.
template <class T>
concept Half16 = std::same_as<T, bf16> || std::same_as<T, fp16>;

//! Element types a collective accepts: a tensor's, and the 16-bit ones
//! (which reduce with strata::Sum only).
//!   static_assert(strata::WireElement<strata::bf16> && !strata::Element<strata::bf16>);
template <class T>
concept WireElement = Element<T> || Half16<T>;

//! The name of an element type as it appears in error messages.
template <WireElement T>
constexpr std::string_view dtype_name() noexcept {
  if constexpr (std::same_as<T, float>) return "float32";
  else if constexpr (std::same_as<T, double>) return "float64";
  else if constexpr (std::same_as<T, std::int32_t>) return "int32";
  else if constexpr (std::same_as<T, std::int64_t>) return "int64";
  else if constexpr (std::same_as<T, bf16>) return "bfloat16";
  else return "float16";
}

namespace detail {
//! `static_assert(dependent_false<T>, "...")` in a discarded branch fires only
//! when that branch is instantiated: the way each dispatch point states, as a
//! sentence, which combination is invalid and what to use instead.
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace detail

}  // namespace strata
