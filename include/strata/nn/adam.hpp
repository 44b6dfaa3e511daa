#pragma once
//! Adam (Kingma & Ba), in Keras' form: the bias correction folded into the
//! step size, epsilon added to sqrt(v).
//!   strata::nn::Adam{1e-3};   strata::nn::Adam{1e-3, {.beta_1 = 0.9f, .beta_2 = 0.999f, .epsilon = 1e-7f}};

#include <cmath>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <strata/nn/optimizer.hpp>

namespace strata::nn {

struct AdamOptions {
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
};

class Adam final : public Optimizer {
 public:
  explicit Adam(LearningRate lr = 1e-3, AdamOptions o = {}) : lr_(std::move(lr)), o_(o) {
    if (!(o_.beta_1 >= 0.f && o_.beta_1 < 1.f && o_.beta_2 >= 0.f && o_.beta_2 < 1.f))
      throw Error("Adam: beta_1 and beta_2 must be in [0, 1)");
  }
  [[nodiscard]] std::string name() const override { return "Adam"; }
  [[nodiscard]] std::size_t slot_count() const noexcept override { return 2; }
  void apply(std::span<float> w, std::span<const float> g, OptimizerState& s, std::size_t offset,
             std::int64_t step) const override {
    const double t = static_cast<double>(step + 1);
    const float lr_t = static_cast<float>(lr_(step) * std::sqrt(1.0 - std::pow(static_cast<double>(o_.beta_2), t)) /
                                          (1.0 - std::pow(static_cast<double>(o_.beta_1), t)));
    float* m = s.slots[0].data() + offset;
    float* v = s.slots[1].data() + offset;
    const float b1 = o_.beta_1, b2 = o_.beta_2, eps = o_.epsilon;
    std::size_t i = 0;
#if defined(__SSE2__)
    // By hand because std::sqrt may set errno, which keeps compilers from
    // vectorizing the loop (5x slower) unless built with -fno-math-errno.
    // The same IEEE operations in the same order as the scalar tail: the
    // results are bitwise identical however the vector is sliced.
    const __m128 b1v = _mm_set1_ps(b1), c1v = _mm_set1_ps(1.f - b1), b2v = _mm_set1_ps(b2),
                 c2v = _mm_set1_ps(1.f - b2), lrv = _mm_set1_ps(lr_t), epsv = _mm_set1_ps(eps);
    float* wp = w.data();
    const float* gp = g.data();
    for (; i + 4 <= w.size(); i += 4) {
      const __m128 gi = _mm_loadu_ps(gp + i);
      const __m128 mi = _mm_add_ps(_mm_mul_ps(b1v, _mm_loadu_ps(m + i)), _mm_mul_ps(c1v, gi));
      const __m128 vi = _mm_add_ps(_mm_mul_ps(b2v, _mm_loadu_ps(v + i)), _mm_mul_ps(_mm_mul_ps(c2v, gi), gi));
      _mm_storeu_ps(m + i, mi);
      _mm_storeu_ps(v + i, vi);
      const __m128 step_i = _mm_div_ps(_mm_mul_ps(lrv, mi), _mm_add_ps(_mm_sqrt_ps(vi), epsv));
      _mm_storeu_ps(wp + i, _mm_sub_ps(_mm_loadu_ps(wp + i), step_i));
    }
#endif
    for (; i < w.size(); ++i) {
      m[i] = b1 * m[i] + (1.f - b1) * g[i];
      v[i] = b2 * v[i] + (1.f - b2) * g[i] * g[i];
      w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
  [[nodiscard]] std::unique_ptr<Optimizer> clone() const override { return std::make_unique<Adam>(*this); }

 private:
  LearningRate lr_;
  AdamOptions o_;
};

}  // namespace strata::nn
