#pragma once
//! Host losses and metrics of the compute vocabulary (kernels/compute.hpp):
//! sums over the rows into a double accumulator, gradients scaled by
//! `scale`. A label that is not a class index throws, naming the example
//! (the label check, argmax, clip and NaN scan are the bodies the CUDA
//! kernels use too: kernels/bodies/losses.hpp).
//! Non-finite values are never hidden: a row whose prediction holds a NaN
//! adds NaN to the loss (whichever class its label names) and to the hit
//! counts (it is neither a hit nor a miss).
//!   double loss = 0;  strata::kernels::host::sparse_crossentropy(p, y, d, 1.f / b, b, 10, true, &loss);
//! Deterministic: rows in order.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include <strata/core/error.hpp>
#include <strata/kernels/bodies/losses.hpp>

namespace strata::kernels::host {

using bodies::prob_epsilon;

//! The class `label` names (bodies::class_of), or an Error naming the example.
inline std::size_t class_index(float label, std::size_t classes, std::size_t row, const char* who) {
  const long long k = bodies::class_of(label, classes);
  if (k < 0)
    throw Error(std::string(who) + ": label " + std::to_string(label) + " of example " + std::to_string(row) +
                " is not a class index in [0, " + std::to_string(classes) + ")");
  return static_cast<std::size_t>(k);
}

using bodies::has_nan;

inline void sparse_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                                std::size_t c, bool from_logits, double* acc) {
  double total = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const float* p = pred + i * c;
    const std::size_t k = class_index(labels[i], c, i, "SparseCategoricalCrossentropy");
    if (from_logits) {
      // log-softmax with the maximum subtracted: never overflows
      const float m = *std::max_element(p, p + c);
      float sum = 0.f;
      for (std::size_t j = 0; j < c; ++j) sum += std::exp(p[j] - m);
      const float lse = m + std::log(sum);
      total += static_cast<double>(lse - p[k]);
      if (d) {
        float* g = d + i * c;
        for (std::size_t j = 0; j < c; ++j) g[j] = scale * std::exp(p[j] - lse);
        g[k] -= scale;
      }
    } else {
      const float pk = bodies::clamp_like_std(p[k], prob_epsilon, 1.f - prob_epsilon);
      // a NaN elsewhere in the row is a NaN loss too (Keras' log-softmax of log(p) sees every class)
      total += has_nan(p, c) ? static_cast<double>(NAN) : -std::log(static_cast<double>(pk));
      if (d) {
        float* g = d + i * c;
        std::fill_n(g, c, 0.f);
        if (p[k] == pk) g[k] = -scale / pk;  // clipped: no gradient, as Keras
      }
    }
  }
  *acc += total;
}

inline void categorical_crossentropy(const float* pred, const float* labels, float* d, float scale,
                                     std::size_t rows, std::size_t c, bool from_logits, double* acc) {
  double total = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const float* p = pred + i * c;
    const float* y = labels + i * c;
    float* g = d ? d + i * c : nullptr;
    if (from_logits) {
      const float m = *std::max_element(p, p + c);
      float sum = 0.f, ysum = 0.f;
      for (std::size_t j = 0; j < c; ++j) sum += std::exp(p[j] - m);
      const float lse = m + std::log(sum);
      for (std::size_t j = 0; j < c; ++j) {
        total += static_cast<double>(y[j] * (lse - p[j]));
        ysum += y[j];
      }
      if (g)
        for (std::size_t j = 0; j < c; ++j) g[j] = scale * (ysum * std::exp(p[j] - lse) - y[j]);
    } else {
      for (std::size_t j = 0; j < c; ++j) {
        const float pj = bodies::clamp_like_std(p[j], prob_epsilon, 1.f - prob_epsilon);
        total += -static_cast<double>(y[j]) * std::log(static_cast<double>(pj));
        if (g) g[j] = p[j] == pj ? -scale * y[j] / pj : 0.f;
      }
    }
  }
  *acc += total;
}

inline void mean_squared_error(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                               std::size_t w, double* acc) {
  double total = 0;
  const float k = 2.f * scale / static_cast<float>(w);
  for (std::size_t i = 0; i < rows; ++i) {
    double row = 0;
    for (std::size_t j = 0; j < w; ++j) {
      const float e = bodies::squared_error_delta(pred[i * w + j], labels[i * w + j]);
      row += static_cast<double>(e) * e;
      if (d) d[i * w + j] = k * e;
    }
    total += row / static_cast<double>(w);
  }
  *acc += total;
}

inline std::size_t argmax(const float* p, std::size_t n) { return bodies::argmax_first(p, n); }

inline void sparse_hits(const float* pred, const float* labels, std::size_t rows, std::size_t c, double* acc) {
  double hits = 0;
  for (std::size_t i = 0; i < rows; ++i)
    hits += has_nan(pred + i * c, c) ? static_cast<double>(NAN) : static_cast<float>(argmax(pred + i * c, c)) == labels[i];
  *acc += hits;
}

inline void categorical_hits(const float* pred, const float* labels, std::size_t rows, std::size_t c, double* acc) {
  double hits = 0;
  for (std::size_t i = 0; i < rows; ++i)
    hits += has_nan(pred + i * c, c) ? static_cast<double>(NAN) : argmax(pred + i * c, c) == argmax(labels + i * c, c);
  *acc += hits;
}

inline void binary_hits(const float* pred, const float* labels, std::size_t n, double* acc) {
  double hits = 0;
  for (std::size_t i = 0; i < n; ++i)
    hits += pred[i] != pred[i] ? static_cast<double>(NAN) : bodies::binary_hit(pred[i], labels[i]);
  *acc += hits;
}

inline void add_square_sum(const float* x, std::size_t n, float k, double* acc) {
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) sq += static_cast<double>(x[i]) * x[i];
  *acc += k * sq;
}

}  // namespace strata::kernels::host
