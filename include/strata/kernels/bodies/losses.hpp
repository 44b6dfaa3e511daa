#pragma once
//! What the losses and metrics of every backend share: the label check (a
//! float label names a class when it is an integral value in [0, classes)),
//! the probability clip, the first-maximum argmax and the NaN scan of a
//! row, the squared error's element. The host loops (kernels/host/
//! losses.hpp) and the CUDA kernels (cuda/kernels/losses.cuh) call these;
//! the host throws on a label class_of refuses, a GPU counts it. And what
//! only a GPU and its stand-in (kernels/host/grid_loops.hpp) run: a sparse
//! cross-entropy row against a lane policy (bodies/rows.hpp), a row of the
//! accuracy count, and the counts a block adds to the totals.
//!   const long long k = strata::kernels::bodies::class_of(labels[i], classes);   // -1: no class
//!   const std::size_t best = strata::kernels::bodies::argmax_first(p, classes);
//!   const double loss = strata::kernels::bodies::sparse_xent_row<true>(HostLanes{}, p, labels[i], g, scale, classes, bad);

#include <cstddef>

#include <strata/kernels/bodies/hd.hpp>
#include <strata/kernels/bodies/rows.hpp>

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

//! One row of the sparse cross-entropy of p[0, classes) (logits when
//! `Logits`, else probabilities) against `label`, as one warp runs it:
//! returns the row's loss (the same in every lane) and writes this caller's
//! share of the gradient g (null: none), scale * (softmax - one-hot) from
//! logits, -scale / p[k] at the label's class from probabilities (0 where p
//! was clipped). A label that names no class sets `bad`: loss 0, gradient 0.
//! A NaN in the row gives a NaN loss.
template <bool Logits, class Lanes>
STRATA_HD double sparse_xent_row(const Lanes& lanes, const float* p, float label, float* g, float scale,
                                 std::size_t classes, bool& bad) {
  const long long k = class_of(label, classes);
  bad = k < 0;
  if (bad) {
    if (g)
      for (std::size_t j = lanes.first(); j < classes; j += lanes.step()) g[j] = 0.f;
    return 0;
  }
  const auto at = static_cast<std::size_t>(k);
  if constexpr (Logits) {  // log-softmax with the maximum subtracted: never overflows
    const float m = lanes.max([&](unsigned l) { return lane_max(l, classes, [&](std::size_t j) { return p[j]; }); });
    const float sum = lanes.sum(
        [&](unsigned l) { return lane_sum(l, classes, [&](std::size_t j) { return exp(sub(p[j], m)); }); });
    const float lse = add(m, log(sum));
    if (g)
      for (std::size_t j = lanes.first(); j < classes; j += lanes.step()) {
        const float v = mul(scale, exp(sub(p[j], lse)));
        g[j] = j == at ? sub(v, scale) : v;
      }
    return static_cast<double>(sub(lse, p[at]));
  } else {
    const float pk = clamp_like_std(p[at], prob_epsilon, 1.f - prob_epsilon);
    const bool nan =
        lanes.any([&](unsigned l) { return lane_any(l, classes, [&](std::size_t j) { return is_nan(p[j]); }); });
    if (g)
      for (std::size_t j = lanes.first(); j < classes; j += lanes.step())
        g[j] = j == at && p[at] == pk ? div(-scale, pk) : 0.f;  // clipped: no gradient, as Keras
    return nan ? static_cast<double>(NAN) : -log(static_cast<double>(pk));
  }
}

//! One row of the accuracy count: its label names no class (bad), its
//! prediction holds a NaN (nan: neither hit nor miss), or it is a hit (the
//! first maximum is at the label's class).
struct RowHit {
  bool hit, bad, nan;
};
STRATA_HD inline RowHit sparse_hit_row(const float* p, float label, std::size_t classes) {
  const long long k = class_of(label, classes);
  const bool bad = k < 0;
  const bool nan = !bad && has_nan(p, classes);
  return {!bad && !nan && argmax_first(p, classes) == static_cast<std::size_t>(k), bad, nan};
}

//! What a block adds for the counts of its rows, through add_to(double*,
//! double) (a GPU's atomicAdd): NaN to *acc when a row held a NaN, the hits
//! to *acc, the rows without a class to *invalid (when given).
template <class Add>
STRATA_HD void add_counts(Add&& add_to, int hits, int bads, int nans, double* acc, double* invalid) {
  if (nans) add_to(acc, static_cast<double>(NAN));
  if (hits) add_to(acc, static_cast<double>(hits));
  if (bads && invalid) add_to(invalid, static_cast<double>(bads));
}

}  // namespace strata::kernels::bodies
