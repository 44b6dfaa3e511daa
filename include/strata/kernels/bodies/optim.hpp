#pragma once
//! Element bodies of the optimizer updates (Keras' SGD, plain, with
//! momentum or Nesterov's; Adam in one pass), one IEEE operation at a time
//! in a fixed order: the host loops (kernels/host/optim.hpp), the host's SSE
//! fast path for Adam (tested against AdamElement) and the CUDA kernels
//! (cuda/kernels/optim.cuh) give the same bits.
//!   strata::kernels::bodies::AdamElement{s}(w[i], g[i], m[i], v[i]);
//!   strata::kernels::bodies::SgdMomentum{s.lr, s.momentum}(w[i], g[i], v[i]);

#include <strata/kernels/bodies/hd.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::kernels::bodies {

//! w -= lr * g.
struct SgdPlain {
  float lr;
  STRATA_HD void operator()(float& w, float g, float& /*v*/) const { w = sub(w, mul(lr, g)); }
};
//! v = momentum * v - lr * g;  w += v.
struct SgdMomentum {
  float lr, momentum;
  STRATA_HD void operator()(float& w, float g, float& v) const {
    v = sub(mul(momentum, v), mul(lr, g));
    w = add(w, v);
  }
};
//! v = momentum * v - lr * g;  w += momentum * v - lr * g.
struct SgdNesterov {
  float lr, momentum;
  STRATA_HD void operator()(float& w, float g, float& v) const {
    v = sub(mul(momentum, v), mul(lr, g));
    w = add(w, sub(mul(momentum, v), mul(lr, g)));
  }
};

//! Calls f(body) with the SGD body `s` asks for.
template <class F>
void visit_sgd(const SgdStep& s, F&& f) {
  if (s.momentum == 0.f) f(SgdPlain{s.lr});
  else if (s.nesterov) f(SgdNesterov{s.lr, s.momentum});
  else f(SgdMomentum{s.lr, s.momentum});
}

//! m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  w -= lr_t m / (sqrt(v) + eps)  (nn/adam.hpp).
struct AdamElement {
  float b1, c1, b2, c2, lr_t, eps;  // c = 1 - b, rounded once
  explicit AdamElement(const AdamStep& s)
      : b1(s.beta_1), c1(1.f - s.beta_1), b2(s.beta_2), c2(1.f - s.beta_2), lr_t(s.lr_t), eps(s.epsilon) {}
  STRATA_HD void operator()(float& w, float g, float& m, float& v) const {
    m = add(mul(b1, m), mul(c1, g));
    v = add(mul(b2, v), mul(mul(c2, g), g));
    w = sub(w, div(mul(lr_t, m), add(sqrt(v), eps)));
  }
};

}  // namespace strata::kernels::bodies
