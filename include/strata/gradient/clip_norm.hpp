#pragma once
//! Clipping by the global norm (nn::Optimizer::global_clipnorm) as the
//! executors run it: each part of the model's reduced gradient (a replica's
//! slice, a shard, a stage's layers) adds its squares, one all-reduce of a
//! double over the parts sums them (the executor's collective: bounded and
//! named as every one), and every part scales what it updates with by
//! kernels::bodies::clip_factor of that sum (1: nothing done, the bits stay).
//! The squares are added in a fixed order (Compute::square_sum): the same
//! bits on the host and a GPU, run after run; with one part, bitwise a
//! by-hand clip of the whole gradient, with several equal to float rounding
//! (the parts' sums are added in the collective's order).
//!   const double sq = strata::detail::square_sum_in(c, part, scratch);   // then all-reduce sq over the parts
//!   strata::detail::clip_in(c, mine, sq, clipnorm, scratch);

#include <cstddef>
#include <span>

#include <strata/kernels/bodies/optim.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/kernels/host/optim.hpp>

namespace strata::detail {

//! The sum of squares of x, which lives in c's memory (c null: the host's), read on the host.
inline double square_sum_in(kernels::Compute* c, std::span<const float> x, kernels::Buffer<double>& scratch) {
  if (!c || c->where() == kernels::Where::Host) return kernels::host::square_sum(x.data(), x.size());
  scratch.resize(*c, Shape{1});
  c->square_sum(x.data(), x.size(), scratch.data());
  double v = 0;
  c->download(&v, scratch.data(), sizeof v);
  return v;
}

//! x (in c's memory; c null: the host's) *= clip_factor(sumsq, clipnorm), the gradient's squared norm `sumsq`.
inline void clip_in(kernels::Compute* c, std::span<float> x, double sumsq, float clipnorm,
                    kernels::Buffer<double>& scratch) {
  if (x.empty() || kernels::bodies::clip_factor(sumsq, clipnorm) == 1.f) return;
  if (!c || c->where() == kernels::Where::Host)
    return kernels::host::scale(x.data(), x.size(), kernels::bodies::clip_factor(sumsq, clipnorm));
  scratch.resize(*c, Shape{1});
  c->upload(scratch.data(), &sumsq, sizeof sumsq);
  c->clip_by_norm(x.data(), x.size(), clipnorm, scratch.data());
}

}  // namespace strata::detail
