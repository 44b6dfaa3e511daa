#pragma once
//! The per-position sparse cross-entropy and accuracy of sequence models.
//! The loss runs one warp per position, its row through the host's body
//! (kernels/bodies/sequence_losses.hpp); each warp counts its example's
//! unmasked labels itself (an integer count: exact), so no scratch memory
//! and no second pass. The accuracy runs one thread per example. Totals
//! go into the double accumulators by one atomic add per block (not bitwise
//! across runs, as every loss and metric accumulator on a GPU); gradients
//! are deterministic. A label that is neither a class nor the ignored class
//! is counted into *invalid and contributes no loss, no hit, a zero gradient.
//!   strata::cuda::detail::launch_sequence_crossentropy(s, logits, y, d, 1.f / b, {b, t, v, true, -1.f}, true, acc, bad);

#include <strata/kernels/bodies/sequence_losses.hpp>
#include <strata/cuda/kernels/common.cuh>

namespace strata::cuda::detail {

using kernels::SequenceLabels;

//! The unmasked labels of example e, counted by the warp's lanes (every lane gets the count).
__device__ inline unsigned warp_unmasked(const float* labels, const SequenceLabels& s, std::size_t e, unsigned lane) {
  unsigned n = 0;
  for (std::size_t t = lane; t < s.steps; t += 32)
    n += !bodies::masked_label(labels[e * s.steps + t], s.masked, s.ignore_class);
  return warp_sum(n);
}

template <bool Logits>
__global__ void sequence_xent_kernel(const float* pred, const float* labels, float* d, float scale, SequenceLabels s,
                                     double* acc, double* invalid) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  const std::size_t rows = s.batch * s.steps, c = s.classes;
  double loss = 0, bad = 0;
  if (row < rows) {  // warp-uniform, as are the label and the count
    const std::size_t e = row / s.steps;
    float* g = d ? d + row * c : nullptr;
    const float label = labels[row];
    const long long k = bodies::class_of(label, c);
    if (bodies::masked_label(label, s.masked, s.ignore_class) || k < 0) {
      bad = bodies::masked_label(label, s.masked, s.ignore_class) ? 0 : 1;
      if (g)
        for (std::size_t j = lane; j < c; j += 32) g[j] = 0.f;
    } else {
      const unsigned n = warp_unmasked(labels, s, e, lane);
      const float w = bodies::div(scale, static_cast<float>(n));
      const WarpLanes lanes{lane};
      const float l = Logits ? bodies::xent_logits_row(lanes, pred + row * c, static_cast<std::size_t>(k), c, w, g)
                             : bodies::xent_probs_row(lanes, pred + row * c, static_cast<std::size_t>(k), c, w, g);
      loss = static_cast<double>(l) / static_cast<double>(n);
    }
  }
  __shared__ double loss_s[warps_per_block], bad_s[warps_per_block];
  if (lane == 0) {
    loss_s[threadIdx.x / 32] = loss;
    bad_s[threadIdx.x / 32] = bad;
  }
  block_accumulate(loss_s, acc);
  block_accumulate(bad_s, invalid);
}

void launch_sequence_crossentropy(cudaStream_t st, const float* pred, const float* labels, float* d, float scale,
                                  const SequenceLabels& s, bool from_logits, double* acc, double* invalid) {
  const std::size_t rows = s.batch * s.steps;
  if (rows == 0 || s.classes == 0) return;
  if (from_logits)
    sequence_xent_kernel<true><<<blocks_for_rows(rows), block_threads, 0, st>>>(pred, labels, d, scale, s, acc, invalid);
  else
    sequence_xent_kernel<false><<<blocks_for_rows(rows), block_threads, 0, st>>>(pred, labels, d, scale, s, acc,
                                                                                 invalid);
  check_launch("sequence_xent_kernel");
}

__global__ void sequence_hits_kernel(const float* pred, const float* labels, SequenceLabels s, double* acc,
                                     double* invalid) {
  const std::size_t e = global_index();
  double frac = 0, bad = 0;
  if (e < s.batch) {
    const std::size_t c = s.classes;
    double hits = 0, n = 0;
    for (std::size_t t = 0; t < s.steps; ++t) {
      const std::size_t row = e * s.steps + t;
      if (bodies::masked_label(labels[row], s.masked, s.ignore_class)) continue;
      n += 1;
      const long long k = bodies::class_of(labels[row], c);
      if (k < 0) {
        bad += 1;
        continue;
      }
      const float* p = pred + row * c;
      hits += bodies::has_nan(p, c) ? static_cast<double>(NAN)
                                    : (bodies::argmax_first(p, c) == static_cast<std::size_t>(k) ? 1.0 : 0.0);
    }
    if (n > 0) frac = hits / n;
  }
  __shared__ double frac_s[block_threads], bad_s[block_threads];
  frac_s[threadIdx.x] = frac;
  bad_s[threadIdx.x] = bad;
  __syncthreads();
  if (threadIdx.x == 0) {
    double f = 0, b = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) {
      f += frac_s[i];
      b += bad_s[i];
    }
    if (acc) atomicAdd(acc, f);
    if (invalid && b > 0) atomicAdd(invalid, b);
  }
}

void launch_sequence_hits(cudaStream_t st, const float* pred, const float* labels, const SequenceLabels& s,
                          double* acc, double* invalid) {
  if (s.batch == 0 || s.steps == 0 || s.classes == 0) return;
  sequence_hits_kernel<<<blocks_exact(s.batch), block_threads, 0, st>>>(pred, labels, s, acc, invalid);
  check_launch("sequence_hits_kernel");
}

}  // namespace strata::cuda::detail
