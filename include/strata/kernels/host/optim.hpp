#pragma once
//! Host optimizer updates of the compute vocabulary (kernels/compute.hpp):
//! SGD (with momentum, Nesterov), the whole Adam and AdamW updates in one
//! pass, and clipping by the global norm (square_sum, scale), over the
//! element bodies the CUDA kernels run too (kernels/bodies/optim.hpp).
//!   strata::kernels::host::adam(w, g, m, v, n, {.lr_t = 1e-3f});
//! Elementwise: any slice gives the same bits as the whole.

#include <cmath>
#include <cstddef>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <strata/kernels/bodies/optim.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::kernels::host {

inline void sgd(float* w, const float* g, float* v, std::size_t n, const SgdStep& s) {
  bodies::visit_sgd(s, [&](auto body) {
    if constexpr (std::is_same_v<decltype(body), bodies::SgdPlain>) {
      float unused = 0.f;  // plain SGD keeps no velocity (`v` may be null)
      for (std::size_t i = 0; i < n; ++i) body(w[i], g[i], unused);
    } else {
      for (std::size_t i = 0; i < n; ++i) body(w[i], g[i], v[i]);
    }
  });
}

//! Adam (Decay false) or AdamW (w *= decay first) over n elements.
template <bool Decay>
inline void adam_pass(float* wp, const float* gp, float* m, float* v, std::size_t n, const AdamStep& s,
                      [[maybe_unused]] float decay) {
  const float b1 = s.beta_1, b2 = s.beta_2, eps = s.epsilon, lr_t = s.lr_t;
  std::size_t i = 0;
#if defined(__SSE2__)
  // The fast path, by hand because std::sqrt may set errno, which keeps
  // compilers from vectorizing the loop (5x slower) unless built with
  // -fno-math-errno. The same IEEE operations in the same order as
  // bodies::AdamElement (the tail, and every GPU element): the results are
  // bitwise identical however the vector is sliced (optim_losses_test).
  const __m128 b1v = _mm_set1_ps(b1), c1v = _mm_set1_ps(1.f - b1), b2v = _mm_set1_ps(b2),
               c2v = _mm_set1_ps(1.f - b2), lrv = _mm_set1_ps(lr_t), epsv = _mm_set1_ps(eps);
  for (; i + 4 <= n; i += 4) {
    const __m128 gi = _mm_loadu_ps(gp + i);
    const __m128 mi = _mm_add_ps(_mm_mul_ps(b1v, _mm_loadu_ps(m + i)), _mm_mul_ps(c1v, gi));
    const __m128 vi = _mm_add_ps(_mm_mul_ps(b2v, _mm_loadu_ps(v + i)), _mm_mul_ps(_mm_mul_ps(c2v, gi), gi));
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
    const __m128 step_i = _mm_div_ps(_mm_mul_ps(lrv, mi), _mm_add_ps(_mm_sqrt_ps(vi), epsv));
    __m128 wi = _mm_loadu_ps(wp + i);
    if constexpr (Decay) wi = _mm_mul_ps(wi, _mm_set1_ps(decay));  // bodies::AdamWElement's decay first
    _mm_storeu_ps(wp + i, _mm_sub_ps(wi, step_i));
  }
#endif
  if constexpr (Decay) {
    const bodies::AdamWElement body{AdamWStep{s, decay, nullptr}};
    for (; i < n; ++i) body(wp[i], gp[i], m[i], v[i]);
  } else {
    const bodies::AdamElement body{s};
    for (; i < n; ++i) body(wp[i], gp[i], m[i], v[i]);
  }
}

inline void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) {
  adam_pass<false>(w, g, m, v, n, s, 1.f);
}
//! AdamW: bodies::AdamWElement over the n elements (the same SSE path as adam, the decay first).
inline void adamw(float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& s) {
  adam_pass<true>(w, g, m, v, n, s.adam, s.decay);
}

//! The sum of x_i^2 in double, in bodies::square_sum_lanes' order (a GPU's bits).
inline double square_sum(const float* x, std::size_t n) {
  constexpr std::size_t L = bodies::square_sum_lanes;
  double lane[L] = {};
  std::size_t i = 0;
  for (; i + L <= n; i += L)  // whole rows of lanes: vectorizes
    for (std::size_t j = 0; j < L; ++j) lane[j] = bodies::square_add(lane[j], x[i + j]);
  for (std::size_t j = 0; i + j < n; ++j) lane[j] = bodies::square_add(lane[j], x[i + j]);
  bodies::fold_square_lanes(lane);
  return lane[0];
}

//! x *= a (nothing when a is 1: the bits stay).
inline void scale(float* x, std::size_t n, float a) {
  if (a == 1.f) return;
  for (std::size_t i = 0; i < n; ++i) x[i] = bodies::mul(x[i], a);
}

}  // namespace strata::kernels::host
