#pragma once
//! 16-bit floating-point values for the wire (gradient compression,
//! strategy/compression.hpp): strata::bf16 (bfloat16: FP32's sign and 8-bit
//! exponent, 7 stored mantissa bits) and strata::fp16 (IEEE 754 binary16:
//! 5-bit exponent, 10 stored mantissa bits, largest finite 65504). Storage
//! only: a value converts from float by rounding to nearest, ties to even
//! (NaN stays NaN, made quiet; fp16 overflows to infinity and keeps
//! subnormals), and back to float exactly. The collectives carry them
//! (strata::WireElement, core/concepts.hpp), summing in FP32 element by
//! element; tensors and kernels do not take them.
//!   strata::bf16 h{3.14159f};   float x = static_cast<float>(h);   // 3.140625
//!   strata::fp16::from_bits(0x7bff) == strata::fp16{65504.f}

#include <bit>
#include <cstdint>

namespace strata {

namespace detail {

//! float -> bfloat16 bits: round to nearest even on the 16 bits dropped.
[[nodiscard]] constexpr std::uint16_t bf16_bits(float f) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN, quiet
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // a carry may reach infinity
}

//! float -> IEEE half bits: round to nearest even, overflow to infinity,
//! subnormal halves below 2^-14, zero below half of 2^-24.
[[nodiscard]] constexpr std::uint16_t fp16_bits(float f) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quiet
  if (a >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // 65536 and up (infinity too)
  // the half's bits before rounding, and the float's mantissa bits it drops (`shift` of them)
  std::uint32_t h = 0, m = 0, shift = 13;
  if (a >= 0x38800000u) {  // a normal half: exponent rebiased, 13 mantissa bits dropped
    m = a & 0x7fffffu;
    h = ((((a >> 23) - 112u) << 10) | (m >> 13));
  } else {  // a subnormal half: the mantissa (with its leading 1) in units of 2^-24
    const std::uint32_t e = a >> 23;
    shift = 126u - e;  // 14 and up
    if (shift > 24u) return sign;  // below 2^-25 (half of the smallest subnormal): zero
    m = (a & 0x7fffffu) | 0x800000u;
    h = m >> shift;
  }
  const std::uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // a carry moves into the exponent (65520 -> infinity)
  return static_cast<std::uint16_t>(sign | h);
}

//! IEEE half bits -> float (exact).
[[nodiscard]] constexpr float fp16_to_float(std::uint16_t b) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x8000u) << 16, e = (b >> 10) & 0x1fu, m = b & 0x3ffu;
  if (e == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));  // infinity, NaN
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(v));
  }
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace detail

//! bfloat16: a float's top 16 bits, rounded to nearest even.
//!   strata::bf16 h{1.f};   h.bits == 0x3f80
struct bf16 {
  std::uint16_t bits = 0;
  constexpr bf16() noexcept = default;
  explicit constexpr bf16(float f) noexcept : bits(detail::bf16_bits(f)) {}
  [[nodiscard]] static constexpr bf16 from_bits(std::uint16_t b) noexcept {
    bf16 h;
    h.bits = b;
    return h;
  }
  explicit constexpr operator float() const noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
  //! The sum in FP32, rounded once (what a reduction's Sum combines).
  friend constexpr bf16 operator+(bf16 a, bf16 b) noexcept { return bf16(float(a) + float(b)); }
  friend constexpr bool operator==(bf16 a, bf16 b) noexcept { return float(a) == float(b); }
};

//! IEEE 754 half precision, rounded to nearest even, overflowing to infinity.
//!   strata::fp16 h{1.f};   h.bits == 0x3c00
struct fp16 {
  std::uint16_t bits = 0;
  constexpr fp16() noexcept = default;
  explicit constexpr fp16(float f) noexcept : bits(detail::fp16_bits(f)) {}
  [[nodiscard]] static constexpr fp16 from_bits(std::uint16_t b) noexcept {
    fp16 h;
    h.bits = b;
    return h;
  }
  explicit constexpr operator float() const noexcept { return detail::fp16_to_float(bits); }
  friend constexpr fp16 operator+(fp16 a, fp16 b) noexcept { return fp16(float(a) + float(b)); }
  friend constexpr bool operator==(fp16 a, fp16 b) noexcept { return float(a) == float(b); }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "16 bits on the wire");

}  // namespace strata
