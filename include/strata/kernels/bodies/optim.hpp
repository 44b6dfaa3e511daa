#pragma once
//! Element bodies of the optimizer updates (Keras' SGD, plain, with
//! momentum or Nesterov's; Adam and AdamW in one pass) and of clipping by
//! the global norm (the sum of squares in a fixed order, the factor), one IEEE operation at a time
//! in a fixed order: the host loops (kernels/host/optim.hpp), the host's SSE
//! fast path for Adam (tested against AdamElement) and the CUDA kernels
//! (cuda/kernels/optim.cuh) give the same bits.
//!   strata::kernels::bodies::AdamElement{s}(w[i], g[i], m[i], v[i]);
//!   strata::kernels::bodies::SgdMomentum{s.lr, s.momentum}(w[i], g[i], v[i]);

#include <cmath>
#include <cstddef>

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

//! m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  w -= lr_t m / (sqrt(v) + eps)  (nn/optimizers/adam.hpp).
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

//! AdamW's decoupled decay, then Adam's update: w *= decay (1 - lr *
//! weight_decay, PyTorch's form: decay = 1 leaves w's bits); AdamElement.
struct AdamWElement {
  AdamElement adam;
  float decay;
  explicit AdamWElement(const AdamWStep& s) : adam(s.adam), decay(s.decay) {}
  STRATA_HD void operator()(float& w, float g, float& m, float& v) const {
    w = mul(w, decay);
    adam(w, g, m, v);
  }
};

// -- clipping by the global norm ------------------------------------------------
// Double operations rounded one at a time (nvcc would contract a * b + c).
STRATA_HD inline double square_add(double acc, float x) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(acc, __dmul_rn(static_cast<double>(x), static_cast<double>(x)));
#else
  return acc + static_cast<double>(x) * static_cast<double>(x);
#endif
}
STRATA_HD inline double dadd_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

//! The fixed order of Compute::square_sum, the same in every space: element
//! i is added (in double) to lane i % square_sum_lanes in index order, then
//! the lanes are folded pairwise (lane j += lane j + w for w = lanes / 2,
//! lanes / 4, ..., 1): a GPU's one block of that many threads, the host's loop.
inline constexpr std::size_t square_sum_lanes = 256;

//! Folds square_sum_lanes partial sums into lane[0], in square_sum's order.
STRATA_HD inline void fold_square_lanes(double* lane) {
  for (std::size_t w = square_sum_lanes / 2; w > 0; w /= 2)
    for (std::size_t j = 0; j < w; ++j) lane[j] = dadd_rn(lane[j], lane[j + w]);
}

//! The factor clipping by the global norm scales a gradient by, from its
//! sum of squares: clipnorm / sqrt(sumsq) (in double, rounded once to float)
//! where that norm is above clipnorm; 1 where it is not, and where it is NaN
//! or infinite (the gradient is left as it is: the finiteness check skips
//! such a step). Keras' global_clipnorm and PyTorch's clip_grad_norm_ without their epsilon.
STRATA_HD inline float clip_factor(double sumsq, float clipnorm) {
#if defined(__CUDA_ARCH__)
  const double norm = __dsqrt_rn(sumsq);
#else
  const double norm = std::sqrt(sumsq);
#endif
  if (!(norm > static_cast<double>(clipnorm)) || !(norm - norm == 0.0)) return 1.f;
#if defined(__CUDA_ARCH__)
  return static_cast<float>(__ddiv_rn(static_cast<double>(clipnorm), norm));
#else
  return static_cast<float>(static_cast<double>(clipnorm) / norm);
#endif
}

}  // namespace strata::kernels::bodies
