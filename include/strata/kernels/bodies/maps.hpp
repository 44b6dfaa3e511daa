#pragma once
//! Element bodies of the maps in the compute vocabulary: axpy, the dropout
//! mask (element i's mask from the i-th draw of strata::Rng{key}, so every
//! backend makes the same masks bit for bit), multiply, the finiteness test
//! of the gradient check, and gradient compression's rounding to 16 bits
//! with error feedback (RoundWithResidual). The host loops (kernels/host/
//! maps.hpp) and the CUDA kernels (cuda/kernels/maps.cuh) both call them.
//!   y[i] = strata::kernels::bodies::Axpy{a}(x[i], y[i]);
//!   mask[i] = strata::kernels::bodies::DropoutMask{key, rate, scale}(i);

#include <cstddef>
#include <cstdint>

#include <strata/core/half.hpp>
#include <strata/kernels/bodies/hd.hpp>

namespace strata::kernels::bodies {

//! y + a * x.
struct Axpy {
  float a;
  STRATA_HD float operator()(float x, float y) const { return add(y, mul(a, x)); }
};

//! x * m (dropout's mask, elementwise products).
struct Multiply {
  STRATA_HD float operator()(float x, float m) const { return mul(x, m); }
};

//! Inverted dropout's mask for element i: 0 when the i-th uniform of
//! strata::Rng{key} is below `rate`, else `scale` = 1 / (1 - rate) (computed
//! once, on the host, by the caller).
struct DropoutMask {
  std::uint64_t key;
  float rate, scale;
  STRATA_HD float operator()(std::size_t i) const {
    return Rng::to_uniform(Rng::draw(key, static_cast<std::uint64_t>(i) + 1)) < rate ? 0.f : scale;
  }
};

//! Gradient compression's rounding (gradient/compression.hpp): v = g + res
//! rounded to T (bf16 or fp16, to nearest even) into `out`; returns what the
//! rounding lost, v - T(v), the next residual (0 where T(v) is not finite:
//! an overflow or a NaN, whose step the finiteness check skips). Branch-free
//! (the host loop vectorizes).
template <class T>
struct RoundWithResidual {
  STRATA_HD float operator()(float g, float res, T& out) const {
    const float v = add(g, res);
    const T h(v);
    const float lost = sub(v, static_cast<float>(h));
    out = h;
    return sub(lost, lost) == 0.f ? lost : 0.f;  // finite (infinity and NaN give NaN)
  }
};

//! Whether the bits u of a float are NaN or infinite (all exponent bits set):
//! an integer test, so the host loop vectorizes.
STRATA_HD inline bool nonfinite_bits(std::uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u; }

}  // namespace strata::kernels::bodies
