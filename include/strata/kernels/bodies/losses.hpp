#pragma once
//! What the losses and metrics of every backend share: the label check (a
//! float label names a class when it is an integral value in [0, classes)),
//! the probability clip, the first-maximum argmax and the NaN scan of a
//! row, the squared error's element. The host loops (kernels/host/
//! losses.hpp) and the CUDA kernels (cuda/kernels/losses.cuh) call these;
//! the host throws on a label class_of refuses, a GPU counts it.
//!   const long long k = strata::kernels::bodies::class_of(labels[i], classes);   // -1: no class
//!   const std::size_t best = strata::kernels::bodies::argmax_first(p, classes);

#include <cstddef>

#include <strata/kernels/bodies/hd.hpp>

namespace strata::kernels::bodies {

constexpr float prob_epsilon = 1e-7f;  // as Keras: probabilities are clipped to [eps, 1 - eps]

//! The class index `label` names, or -1 when it names none. NaN and
//! out-of-range values fail the first test (converting them would be undefined).
STRATA_HD inline long long class_of(float label, std::size_t classes) {
  if (!(label >= 0.f && label < 9.0e18f)) return -1;
  const auto k = static_cast<long long>(label);
  if (static_cast<float>(k) != label || static_cast<std::size_t>(k) >= classes) return -1;
  return k;
}

//! std::clamp(v, lo, hi) exactly (a NaN stays NaN; fminf/fmaxf would drop it).
STRATA_HD inline float clamp_like_std(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }

//! std::max_element's index: the first maximum; a NaN is never greater, so
//! it only wins in first place. 0 for n = 0.
STRATA_HD inline std::size_t argmax_first(const float* p, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t j = 1; j < n; ++j)
    if (p[best] < p[j]) best = j;
  return best;
}

//! Whether p[0, n) holds a NaN.
STRATA_HD inline bool has_nan(const float* p, std::size_t n) {
  bool nan = false;
  for (std::size_t j = 0; j < n; ++j) nan |= is_nan(p[j]);
  return nan;
}

//! One element of the mean squared error: e = pred - label; the gradient is
//! k * e with k = 2 * scale / width (rounded once, by the caller).
STRATA_HD inline float squared_error_delta(float pred, float label) { return sub(pred, label); }

//! A binary hit: prediction and label on the same side of 0.5.
STRATA_HD inline bool binary_hit(float pred, float label) { return (pred > 0.5f) == (label > 0.5f); }

}  // namespace strata::kernels::bodies
