#pragma once
//! What every kernel body shares: STRATA_HD (__host__ __device__ under nvcc,
//! nothing for g++; core/host_device.hpp defines it), IEEE operations rounded one
//! at a time, and the math functions, each spelled once for both compilers.
//! nvcc contracts a * b + c into one FMA by default; g++ (ISO C++, no FMA
//! in the x86-64 baseline) rounds the product first. The bodies write every
//! product, sum, quotient and square root through mul/add/sub/div/sqrt,
//! which are __fmul_rn and friends on the device and the plain operators on
//! the host: the same bits in both places.
//!   STRATA_HD inline float axpy1(float a, float x, float y) { return strata::kernels::bodies::add(y, mul(a, x)); }
//! Header-only, no state: include it from .hpp and .cuh files alike.

#include <cmath>

#include <strata/core/random.hpp>

namespace strata::kernels::bodies {

STRATA_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
STRATA_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
STRATA_HD inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
STRATA_HD inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
STRATA_HD inline float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
STRATA_HD inline double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// Transcendental functions: glibc's and CUDA's agree to a few ulps, not
// bitwise (kernels/compute.hpp says which ops are bitwise across spaces).
STRATA_HD inline float exp(float a) {
#if defined(__CUDA_ARCH__)
  return expf(a);
#else
  return std::exp(a);
#endif
}
STRATA_HD inline float log(float a) {
#if defined(__CUDA_ARCH__)
  return logf(a);
#else
  return std::log(a);
#endif
}
STRATA_HD inline double log(double a) {
#if defined(__CUDA_ARCH__)
  return ::log(a);
#else
  return std::log(a);
#endif
}
STRATA_HD inline float tanh(float a) {
#if defined(__CUDA_ARCH__)
  return tanhf(a);
#else
  return std::tanh(a);
#endif
}
STRATA_HD inline float erf(float a) {
#if defined(__CUDA_ARCH__)
  return erff(a);
#else
  return std::erf(a);
#endif
}

STRATA_HD inline float erfc(float a) {
#if defined(__CUDA_ARCH__)
  return erfcf(a);
#else
  return std::erfc(a);
#endif
}

//! The larger of a and b; a NaN argument loses to a number (fmaxf's rule on both sides).
STRATA_HD inline float fmax(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#else
  return std::fmax(a, b);
#endif
}

//! Whether v is NaN (v != v: no library call, vectorizes).
STRATA_HD inline bool is_nan(float v) { return v != v; }

}  // namespace strata::kernels::bodies
