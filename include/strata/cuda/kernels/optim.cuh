#pragma once
//! Optimizer updates, each one pass over its n elements (Thrust's for_each
//! over the host's element bodies, kernels/bodies/optim.hpp): the same IEEE
//! operations in the host's order, bitwise equal to the host.
//!   strata::cuda::detail::launch_adam(s, w, g, m, v, n, {.lr_t = lr_t});
//!   strata::cuda::detail::launch_sgd(s, w, g, v, n, {.lr = 0.1f, .momentum = 0.9f});

#include <strata/kernels/bodies/optim.hpp>
#include <strata/cuda/kernels/common.cuh>

namespace strata::cuda::detail {

template <class Body>
struct SgdAt {
  Body body;
  float* w;
  const float* g;
  float* v;
  __device__ void operator()(std::size_t i) const {
    float unused = 0.f;  // plain SGD keeps no velocity (`v` may be null)
    body(w[i], g[i], v ? v[i] : unused);
  }
};

void launch_sgd(cudaStream_t s, float* w, const float* g, float* v, std::size_t n, const SgdStep& st) {
  bodies::visit_sgd(st, [&](auto body) {
    float* velocity = st.momentum == 0.f ? nullptr : v;
    for_each_index(s, n, SgdAt<decltype(body)>{body, w, g, velocity}, "sgd (for_each)");
  });
}

struct AdamAt {
  bodies::AdamElement body;
  float* w;
  const float* g;
  float* m;
  float* v;
  __device__ void operator()(std::size_t i) const { body(w[i], g[i], m[i], v[i]); }
};

void launch_adam(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& st) {
  for_each_index(s, n, AdamAt{bodies::AdamElement{st}, w, g, m, v}, "adam (for_each)");
}

}  // namespace strata::cuda::detail
