#pragma once
//! Host optimizer updates of the compute vocabulary (kernels/compute.hpp):
//! SGD (with momentum, Nesterov) and the whole Adam update in one pass, over
//! the element bodies the CUDA kernels run too (kernels/bodies/optim.hpp).
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

inline void adam(float* wp, const float* gp, float* m, float* v, std::size_t n, const AdamStep& s) {
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
    _mm_storeu_ps(wp + i, _mm_sub_ps(_mm_loadu_ps(wp + i), step_i));
  }
#endif
  const bodies::AdamElement body{s};
  for (; i < n; ++i) body(wp[i], gp[i], m[i], v[i]);
}

}  // namespace strata::kernels::host
