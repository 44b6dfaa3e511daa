#pragma once
//! The per-position sparse cross-entropy of a sequence model, one row (one
//! position's predictions) at a time, written once against a lane policy
//! (bodies/rows.hpp): the host loops (kernels/host/sequence_losses.hpp) play
//! a warp's lanes, the CUDA kernels (cuda/kernels/sequence_losses.cuh) run a
//! warp per row. `w` is the row's weight in the gradient: the loss scale
//! over the unmasked positions of its example.
//!   const float loss = strata::kernels::bodies::xent_logits_row(HostLanes{}, p, k, classes, w, g);

#include <cstddef>

#include <strata/kernels/bodies/losses.hpp>
#include <strata/kernels/bodies/rows.hpp>

namespace strata::kernels::bodies {

//! The label of one position: a class index, the ignored class (masked), or neither (invalid).
STRATA_HD inline bool masked_label(float label, bool masked, float ignore_class) {
  return masked && label == ignore_class;
}

//! From logits: loss = logsumexp(p) - p[k]; g (may be null) = w * (softmax(p) - onehot(k)).
template <class Lanes>
STRATA_HD float xent_logits_row(const Lanes& lanes, const float* p, std::size_t k, std::size_t n, float w, float* g) {
  const float m = lanes.max([&](unsigned l) { return lane_max(l, n, [&](std::size_t j) { return p[j]; }); });
  const float s = lanes.sum([&](unsigned l) { return lane_sum(l, n, [&](std::size_t j) { return exp(sub(p[j], m)); }); });
  const float lse = add(m, log(s));
  if (g)
    for (std::size_t j = lanes.first(); j < n; j += lanes.step()) {
      const float v = mul(w, exp(sub(p[j], lse)));
      g[j] = j == k ? sub(v, w) : v;
    }
  return sub(lse, p[k]);
}

//! From probabilities: loss = -log(clip(p[k])) (NaN when the row holds a NaN,
//! as the [batch] loss); g = -w / p[k] at k unless clipped (Keras), else 0.
template <class Lanes>
STRATA_HD float xent_probs_row(const Lanes& lanes, const float* p, std::size_t k, std::size_t n, float w, float* g) {
  const float pk = clamp_like_std(p[k], prob_epsilon, 1.f - prob_epsilon);
  const float nans =
      lanes.sum([&](unsigned l) { return lane_sum(l, n, [&](std::size_t j) { return is_nan(p[j]) ? 1.f : 0.f; }); });
  if (g)
    for (std::size_t j = lanes.first(); j < n; j += lanes.step()) g[j] = j == k && p[k] == pk ? div(-w, pk) : 0.f;
  return nans > 0.f ? NAN : -log(pk);
}

}  // namespace strata::kernels::bodies
