#pragma once
//! Optimizer updates, each one pass over its n elements in one kernel, with
//! the host loops' IEEE operations in the host's order (__fmul_rn and
//! friends keep nvcc from fusing them into FMAs): bitwise equal to the host.
//!   strata::cuda::detail::launch_adam(s, w, g, m, v, n, {.lr_t = lr_t});
//!   strata::cuda::detail::launch_sgd(s, w, g, v, n, {.lr = 0.1f, .momentum = 0.9f});

#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda::detail {

template <int Kind>  // 0: plain, 1: momentum, 2: Nesterov
__global__ void sgd_kernel(float* w, const float* g, float* v, std::size_t n, float lr, float momentum) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float step = __fmul_rn(lr, g[i]);
    if constexpr (Kind == 0) {
      w[i] = __fsub_rn(w[i], step);
    } else {
      const float vi = __fsub_rn(__fmul_rn(momentum, v[i]), step);
      v[i] = vi;
      if constexpr (Kind == 1) w[i] = __fadd_rn(w[i], vi);
      else w[i] = __fadd_rn(w[i], __fsub_rn(__fmul_rn(momentum, vi), step));
    }
  }
}

void launch_sgd(cudaStream_t s, float* w, const float* g, float* v, std::size_t n, const SgdStep& st) {
  if (n == 0) return;
  if (st.momentum == 0.f)
    sgd_kernel<0><<<blocks_for(n), block_threads, 0, s>>>(w, g, v, n, st.lr, st.momentum);
  else if (!st.nesterov)
    sgd_kernel<1><<<blocks_for(n), block_threads, 0, s>>>(w, g, v, n, st.lr, st.momentum);
  else
    sgd_kernel<2><<<blocks_for(n), block_threads, 0, s>>>(w, g, v, n, st.lr, st.momentum);
  check_launch("sgd_kernel");
}

//! m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  w -= lr_t m / (sqrt(v) + eps)  (nn/adam.hpp).
__global__ void adam_kernel(float* w, const float* g, float* m, float* v, std::size_t n, AdamStep st) {
  const float c1 = 1.f - st.beta_1, c2 = 1.f - st.beta_2;
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(st.beta_1, m[i]), __fmul_rn(c1, gi));
    const float vi = __fadd_rn(__fmul_rn(st.beta_2, v[i]), __fmul_rn(__fmul_rn(c2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    w[i] = __fsub_rn(w[i], __fdiv_rn(__fmul_rn(st.lr_t, mi), __fadd_rn(__fsqrt_rn(vi), st.epsilon)));
  }
}

void launch_adam(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& st) {
  if (n == 0) return;
  adam_kernel<<<blocks_for(n), block_threads, 0, s>>>(w, g, m, v, n, st);
  check_launch("adam_kernel");
}

}  // namespace strata::cuda::detail
