#pragma once
//! Host per-position sparse cross-entropy and accuracy of the compute
//! vocabulary (kernels/compute.hpp: sequence_crossentropy, sequence_hits):
//! each position's row through the body a GPU warp runs too
//! (kernels/bodies/sequence_losses.hpp). A label that is neither a class
//! index nor the ignored class throws, naming its example and position.
//!   double loss = 0;  strata::kernels::host::sequence_crossentropy(p, y, d, 1.f / b, {b, t, v}, true, &loss);
//! Deterministic: examples and positions in order.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include <strata/core/error.hpp>
#include <strata/kernels/bodies/sequence_losses.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::kernels::host {

//! The class of label (e, t), or an Error naming them (masked labels are not asked).
inline std::size_t position_class(float label, const SequenceLabels& s, std::size_t e, std::size_t t,
                                  const char* who) {
  const long long k = bodies::class_of(label, s.classes);
  if (k < 0)
    throw Error(std::string(who) + ": label " + std::to_string(label) + " of example " + std::to_string(e) +
                ", position " + std::to_string(t) + " is not a class index in [0, " + std::to_string(s.classes) + ")" +
                (s.masked ? " nor the ignored class " + std::to_string(s.ignore_class) : std::string()));
  return static_cast<std::size_t>(k);
}

//! How many of example e's labels are not masked.
inline std::size_t unmasked_positions(const float* labels, const SequenceLabels& s, std::size_t e) {
  std::size_t n = 0;
  for (std::size_t t = 0; t < s.steps; ++t) n += !bodies::masked_label(labels[e * s.steps + t], s.masked, s.ignore_class);
  return n;
}

inline void sequence_crossentropy(const float* pred, const float* labels, float* d, float scale,
                                  const SequenceLabels& s, bool from_logits, double* acc) {
  const std::size_t c = s.classes;
  double total = 0;
  for (std::size_t e = 0; e < s.batch; ++e) {
    const std::size_t n = unmasked_positions(labels, s, e);
    const float w = n ? bodies::div(scale, static_cast<float>(n)) : 0.f;
    double example = 0;
    for (std::size_t t = 0; t < s.steps; ++t) {
      const std::size_t row = e * s.steps + t;
      float* g = d ? d + row * c : nullptr;
      if (bodies::masked_label(labels[row], s.masked, s.ignore_class)) {
        if (g) std::fill_n(g, c, 0.f);
        continue;
      }
      const std::size_t k = position_class(labels[row], s, e, t, "SparseCategoricalCrossentropy");
      const float loss = from_logits ? bodies::xent_logits_row(bodies::HostLanes{}, pred + row * c, k, c, w, g)
                                     : bodies::xent_probs_row(bodies::HostLanes{}, pred + row * c, k, c, w, g);
      example += static_cast<double>(loss);
    }
    if (n) total += example / static_cast<double>(n);
  }
  *acc += total;
}

inline void sequence_hits(const float* pred, const float* labels, const SequenceLabels& s, double* acc) {
  const std::size_t c = s.classes;
  double total = 0;
  for (std::size_t e = 0; e < s.batch; ++e) {
    const std::size_t n = unmasked_positions(labels, s, e);
    double hits = 0;
    for (std::size_t t = 0; t < s.steps; ++t) {
      const std::size_t row = e * s.steps + t;
      if (bodies::masked_label(labels[row], s.masked, s.ignore_class)) continue;
      const std::size_t k = position_class(labels[row], s, e, t, "sparse_categorical_accuracy");
      const float* p = pred + row * c;
      hits += bodies::has_nan(p, c) ? static_cast<double>(NAN) : bodies::argmax_first(p, c) == k;
    }
    if (n) total += hits / static_cast<double>(n);
  }
  *acc += total;
}

}  // namespace strata::kernels::host
