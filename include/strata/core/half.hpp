#pragma once
//! 16-bit floating-point values for the wire (gradient compression,
//! gradient/compression.hpp): strata::bf16 (bfloat16: FP32's sign and 8-bit
//! exponent, 7 stored mantissa bits) and strata::fp16 (IEEE 754 binary16:
//! 5-bit exponent, 10 stored mantissa bits, largest finite 65504). Storage
//! only: a value converts from float by rounding to nearest, ties to even
//! (NaN stays NaN, made quiet; fp16 overflows to infinity and keeps
//! subnormals), and back to float exactly. The collectives carry them
//! (strata::WireElement, core/concepts.hpp), summing in FP32 element by
//! element; tensors do not take them. The conversions are STRATA_HD: the
//! CUDA backend's kernels (compression's rounding, the device team's 16-bit
//! sum) run these very bodies, so a GPU rounds as the host does.
//!   strata::bf16 h{3.14159f};   float x = static_cast<float>(h);   // 3.140625
//!   strata::fp16::from_bits(0x7bff) == strata::fp16{65504.f}

#include <cstdint>
#include <type_traits>

#include <strata/core/host_device.hpp>

namespace strata {

namespace detail {

//! std::bit_cast, spelled so that device code may call it (nvcc, g++ and
//! clang all have the builtin; std::bit_cast is a host function to nvcc).
template <class To, class From>
STRATA_HD constexpr To bits_as(From f) noexcept {
  return __builtin_bit_cast(To, f);
}

// The conversions are branch-free (selects), so that the loops that call
// them over a gradient vectorize.

//! float -> bfloat16 bits: round to nearest even on the 16 bits dropped.
[[nodiscard]] STRATA_HD constexpr std::uint16_t bf16_bits(float f) noexcept {
  const auto u = bits_as<std::uint32_t>(f);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // a carry may reach infinity
  const std::uint32_t nan = (u >> 16) | 0x0040u;                          // NaN, made quiet, sign kept
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

//! float -> IEEE half bits: round to nearest even, overflow to infinity,
//! subnormal halves below 2^-14, zero below half of 2^-24.
[[nodiscard]] STRATA_HD constexpr std::uint16_t fp16_bits(float f) noexcept {
  const auto u = bits_as<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  // a normal half: the exponent rebiased (127 -> 15), 13 mantissa bits dropped, rounded to nearest
  // even (a carry moves into the exponent: 65520 becomes infinity)
  const std::uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // below 2^-14: adding 0.5 (whose last bit is 2^-24) rounds to nearest even in units of 2^-24
  const std::uint32_t sub = bits_as<std::uint32_t>(bits_as<float>(a) + 0.5f) - 0x3f000000u;
  const std::uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN, made quiet
  std::uint32_t h = a < 0x38800000u ? sub : normal;
  h = a >= 0x47800000u ? 0x7c00u : h;  // 65536 and up, infinity too
  h = a > 0x7f800000u ? nan : h;
  return static_cast<std::uint16_t>(sign | h);
}

//! IEEE half bits -> float (exact).
[[nodiscard]] STRATA_HD constexpr float fp16_to_float(std::uint16_t b) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x8000u) << 16;
  const std::uint32_t em = static_cast<std::uint32_t>(b & 0x7fffu) << 13, e = em & 0x0f800000u;
  const std::uint32_t normal = em + (112u << 23);  // the exponent rebiased (15 -> 127)
  const std::uint32_t special = em + (224u << 23);  // infinity, NaN: the exponent all ones
  // zero or subnormal: (1 + m / 1024) 2^-14 - 2^-14 = m 2^-24, exact
  const std::uint32_t sub = bits_as<std::uint32_t>(bits_as<float>(em + (113u << 23)) -
                                                         bits_as<float>(113u << 23));
  return bits_as<float>(sign | (e == 0x0f800000u ? special : e == 0 ? sub : normal));
}

}  // namespace detail

//! bfloat16: a float's top 16 bits, rounded to nearest even.
//!   strata::bf16 h{1.f};   h.bits == 0x3f80
struct bf16 {
  std::uint16_t bits = 0;
  constexpr bf16() noexcept = default;
  STRATA_HD explicit constexpr bf16(float f) noexcept : bits(detail::bf16_bits(f)) {}
  [[nodiscard]] STRATA_HD static constexpr bf16 from_bits(std::uint16_t b) noexcept {
    bf16 h;
    h.bits = b;
    return h;
  }
  STRATA_HD explicit constexpr operator float() const noexcept {
    return detail::bits_as<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  //! The sum in FP32, rounded once (what a reduction's Sum combines).
  STRATA_HD friend constexpr bf16 operator+(bf16 a, bf16 b) noexcept { return bf16(float(a) + float(b)); }
  STRATA_HD friend constexpr bool operator==(bf16 a, bf16 b) noexcept { return float(a) == float(b); }
};

//! IEEE 754 half precision, rounded to nearest even, overflowing to infinity.
//!   strata::fp16 h{1.f};   h.bits == 0x3c00
struct fp16 {
  std::uint16_t bits = 0;
  constexpr fp16() noexcept = default;
  STRATA_HD explicit constexpr fp16(float f) noexcept : bits(detail::fp16_bits(f)) {}
  [[nodiscard]] STRATA_HD static constexpr fp16 from_bits(std::uint16_t b) noexcept {
    fp16 h;
    h.bits = b;
    return h;
  }
  STRATA_HD explicit constexpr operator float() const noexcept { return detail::fp16_to_float(bits); }
  STRATA_HD friend constexpr fp16 operator+(fp16 a, fp16 b) noexcept { return fp16(float(a) + float(b)); }
  STRATA_HD friend constexpr bool operator==(fp16 a, fp16 b) noexcept { return float(a) == float(b); }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "16 bits on the wire");

//! Which 16-bit format a wire buffer holds, where the type is not in the
//! signature (the computes' rounding ops, the device collectives' 16-bit
//! sums: virtual calls).
enum class WireFormat : unsigned char { bf16, fp16 };

//! f(T{}) with T the format's type (bf16 or fp16).
//!   strata::visit_wire(f, [&](auto t) { using T = decltype(t); ... });
template <class F>
constexpr decltype(auto) visit_wire(WireFormat f, F&& fn) {
  if (f == WireFormat::bf16) return fn(bf16{});
  return fn(fp16{});
}
//! The format of type T.
template <class T>
inline constexpr WireFormat wire_format_of = std::is_same_v<std::remove_const_t<T>, bf16> ? WireFormat::bf16
                                                                                         : WireFormat::fp16;

}  // namespace strata
