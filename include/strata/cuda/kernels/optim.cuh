#pragma once
//! Optimizer updates, each one pass over its n elements (Thrust's for_each
//! over the host's element bodies, kernels/bodies/optim.hpp): the same IEEE
//! operations in the host's order, bitwise equal to the host; and clipping
//! by the global norm (the sum of squares in the host's fixed order, one block).
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

//! The updates of a capturable step: the rate read from the table at the
//! iteration in device memory, nothing done when the finiteness gate is shut.
template <class Body>
struct SgdAtStep {
  Body body;
  kernels::DeviceStep d;
  float* w;
  const float* g;
  float* v;
  __device__ void operator()(std::size_t i) const {
    if (!kernels::update_runs(d)) return;
    Body b = body;
    b.lr = kernels::rate_at(*d.rates, d.counters->iteration);
    float unused = 0.f;
    b(w[i], g[i], v ? v[i] : unused);
  }
};

void launch_sgd_at(cudaStream_t s, float* w, const float* g, float* v, std::size_t n, const SgdStep& st,
                   const kernels::DeviceStep& d) {
  bodies::visit_sgd(st, [&](auto body) {
    float* velocity = st.momentum == 0.f ? nullptr : v;
    for_each_index(s, n, SgdAtStep<decltype(body)>{body, d, w, g, velocity}, "sgd_at (for_each)");
  });
}

struct AdamAtStep {
  bodies::AdamElement body;
  kernels::DeviceStep d;
  float* w;
  const float* g;
  float* m;
  float* v;
  __device__ void operator()(std::size_t i) const {
    if (!kernels::update_runs(d)) return;
    bodies::AdamElement b = body;
    b.lr_t = kernels::rate_at(*d.rates, d.counters->iteration);
    b(w[i], g[i], m[i], v[i]);
  }
};

void launch_adam_at(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& st,
                    const kernels::DeviceStep& d) {
  for_each_index(s, n, AdamAtStep{bodies::AdamElement{st}, d, w, g, m, v}, "adam_at (for_each)");
}

struct AdamWAt {
  bodies::AdamWElement body;
  float* w;
  const float* g;
  float* m;
  float* v;
  __device__ void operator()(std::size_t i) const { body(w[i], g[i], m[i], v[i]); }
};

void launch_adamw(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& st) {
  for_each_index(s, n, AdamWAt{bodies::AdamWElement{st}, w, g, m, v}, "adamw (for_each)");
}

struct AdamWAtStep {
  bodies::AdamWElement body;
  kernels::DeviceStep d;
  const kernels::RateTable* decays;
  float* w;
  const float* g;
  float* m;
  float* v;
  __device__ void operator()(std::size_t i) const {
    if (!kernels::update_runs(d)) return;
    bodies::AdamWElement b = body;
    b.adam.lr_t = kernels::rate_at(*d.rates, d.counters->iteration);
    b.decay = kernels::rate_at(*decays, d.counters->iteration);
    b(w[i], g[i], m[i], v[i]);
  }
};

void launch_adamw_at(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n,
                     const AdamWStep& st, const kernels::DeviceStep& d) {
  for_each_index(s, n, AdamWAtStep{bodies::AdamWElement{st}, d, st.decays, w, g, m, v}, "adamw_at (for_each)");
}

//! The sum of squares in bodies::square_sum_lanes' order: one block, thread
//! j sums lane j in index order, then the lanes fold pairwise as the host's.
__global__ void square_sum_kernel_fixed(const float* x, std::size_t n, double* out) {
  __shared__ double lane[bodies::square_sum_lanes];
  const std::size_t j = threadIdx.x;
  double acc = 0;
  for (std::size_t i = j; i < n; i += bodies::square_sum_lanes) acc = bodies::square_add(acc, x[i]);
  lane[j] = acc;
  for (std::size_t w = bodies::square_sum_lanes / 2; w > 0; w /= 2) {
    __syncthreads();
    if (j < w) lane[j] = bodies::dadd_rn(lane[j], lane[j + w]);
  }
  if (j == 0) *out = lane[0];
}

void launch_square_sum(cudaStream_t s, const float* x, std::size_t n, double* out) {
  static_assert(bodies::square_sum_lanes <= 1024, "one block of square_sum_lanes threads");
  square_sum_kernel_fixed<<<1, bodies::square_sum_lanes, 0, s>>>(x, n, out);
  check_launch("square_sum_kernel_fixed");
}

struct ClipByNormAt {
  float* x;
  float clipnorm;
  const double* sumsq;
  __device__ void operator()(std::size_t i) const {
    const float f = bodies::clip_factor(*sumsq, clipnorm);
    if (f != 1.f) x[i] = bodies::mul(x[i], f);
  }
};

void launch_clip_by_norm(cudaStream_t s, float* x, std::size_t n, float clipnorm, const double* sumsq) {
  for_each_index(s, n, ClipByNormAt{x, clipnorm, sumsq}, "clip_by_norm (for_each)");
}

struct EndStepAt {
  kernels::StepCounters* c;
  bool gated;
  __device__ void operator()(std::size_t) const { kernels::end_step_body(*c, gated); }
};

void launch_end_step(cudaStream_t s, kernels::StepCounters* c, bool gated) {
  for_each_index(s, 1, EndStepAt{c, gated}, "end_step");
}

}  // namespace strata::cuda::detail
