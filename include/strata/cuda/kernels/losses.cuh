#pragma once
//! Losses and metrics. The cross-entropies fuse (log-)softmax, the loss and
//! its gradient in one pass per row (one warp per row); the hit counts scan
//! each row on one thread, exactly like std::max_element (first maximum; a
//! NaN only wins in first place). Each block adds its sum to the double in
//! device memory with one atomic add: the totals are not bitwise
//! reproducible across runs (the hit counts are: integers add exactly).
//! A label that names no class is counted into *invalid and contributes no
//! loss, no hit and a zero gradient. As on the host, a prediction row with
//! a NaN gives a NaN loss and adds NaN to the hit counts. The label check,
//! clip, argmax and NaN scan are the host's bodies (kernels/bodies/losses.hpp);
//! so are the sparse cross-entropy's row (run here by a warp's lanes), the
//! accuracy count's row and what a block adds, which a GPU's stand-in runs
//! over the same rows and blocks (kernels/host/grid_loops.hpp).
//!   strata::cuda::detail::launch_sparse_crossentropy(s, logits, y, d, 1.f / b, b, 10, true, acc, invalid);
//!   strata::cuda::detail::launch_sparse_hits(s, logits, y, b, 10, hits, invalid);

#include <strata/kernels/bodies/losses.hpp>
#include <strata/cuda/kernels/common.cuh>

namespace strata::cuda::detail {

using bodies::prob_epsilon;  // probabilities are clipped to [eps, 1 - eps]

//! Writes this warp's loss (lane 0) and invalid count, then adds the block's.
__device__ inline void rows_accumulate(double loss, double bad, double* acc, double* invalid) {
  __shared__ double loss_s[warps_per_block], bad_s[warps_per_block];
  if (threadIdx.x % 32 == 0) {
    loss_s[threadIdx.x / 32] = loss;
    bad_s[threadIdx.x / 32] = bad;
  }
  block_accumulate(loss_s, acc);
  block_accumulate(bad_s, invalid);
}

template <bool Logits>
__global__ void sparse_xent_kernel(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                                   std::size_t classes, double* acc, double* invalid) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  double loss = 0;
  bool bad = false;
  if (row < rows)  // warp-uniform, as is the label
    loss = bodies::sparse_xent_row<Logits>(WarpLanes{threadIdx.x % 32}, pred + row * classes, labels[row],
                                           d ? d + row * classes : nullptr, scale, classes, bad);
  rows_accumulate(loss, bad ? 1 : 0, acc, invalid);
}

void launch_sparse_crossentropy(cudaStream_t s, const float* pred, const float* labels, float* d, float scale,
                                std::size_t rows, std::size_t classes, bool from_logits, double* acc,
                                double* invalid) {
  if (rows == 0) return;
  if (from_logits)
    sparse_xent_kernel<true><<<blocks_for_rows(rows), block_threads, 0, s>>>(pred, labels, d, scale, rows, classes,
                                                                             acc, invalid);
  else
    sparse_xent_kernel<false><<<blocks_for_rows(rows), block_threads, 0, s>>>(pred, labels, d, scale, rows, classes,
                                                                              acc, invalid);
  check_launch("sparse_xent_kernel");
}

template <bool Logits>
__global__ void categorical_xent_kernel(const float* pred, const float* labels, float* d, float scale,
                                        std::size_t rows, std::size_t classes, double* acc) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  double loss = 0;
  if (row < rows) {
    const float* p = pred + row * classes;
    const float* y = labels + row * classes;
    float* g = d ? d + row * classes : nullptr;
    if constexpr (Logits) {
      float m = -INFINITY;
      for (std::size_t j = lane; j < classes; j += 32) m = fmaxf(m, p[j]);
      m = warp_max(m);
      float sum = 0.f, ysum = 0.f;
      for (std::size_t j = lane; j < classes; j += 32) sum += expf(p[j] - m);
      const float lse = m + logf(warp_sum(sum));
      for (std::size_t j = lane; j < classes; j += 32) {
        loss += static_cast<double>(__fmul_rn(y[j], lse - p[j]));
        ysum += y[j];
      }
      loss = warp_sum(loss);
      ysum = warp_sum(ysum);
      if (g)
        for (std::size_t j = lane; j < classes; j += 32)
          g[j] = __fmul_rn(scale, __fsub_rn(__fmul_rn(ysum, expf(p[j] - lse)), y[j]));
    } else {
      for (std::size_t j = lane; j < classes; j += 32) {
        const float pj = bodies::clamp_like_std(p[j], prob_epsilon, 1.f - prob_epsilon);
        loss += __dmul_rn(-static_cast<double>(y[j]), log(static_cast<double>(pj)));
        if (g) g[j] = p[j] == pj ? __fmul_rn(-scale, y[j]) / pj : 0.f;
      }
      loss = warp_sum(loss);
    }
  }
  rows_accumulate(loss, 0, acc, nullptr);
}

void launch_categorical_crossentropy(cudaStream_t s, const float* pred, const float* labels, float* d, float scale,
                                     std::size_t rows, std::size_t classes, bool from_logits, double* acc) {
  if (rows == 0) return;
  if (from_logits)
    categorical_xent_kernel<true><<<blocks_for_rows(rows), block_threads, 0, s>>>(pred, labels, d, scale, rows,
                                                                                  classes, acc);
  else
    categorical_xent_kernel<false><<<blocks_for_rows(rows), block_threads, 0, s>>>(pred, labels, d, scale, rows,
                                                                                   classes, acc);
  check_launch("categorical_xent_kernel");
}

__global__ void mse_kernel(const float* pred, const float* labels, float* d, float k, std::size_t rows,
                           std::size_t width, double* acc) {
  const std::size_t row = std::size_t{blockIdx.x} * warps_per_block + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  double loss = 0;
  if (row < rows) {
    const std::size_t at = row * width;
    double sum = 0;
    for (std::size_t j = lane; j < width; j += 32) {
      const float e = bodies::squared_error_delta(pred[at + j], labels[at + j]);
      sum += __dmul_rn(static_cast<double>(e), static_cast<double>(e));
      if (d) d[at + j] = __fmul_rn(k, e);
    }
    loss = warp_sum(sum) / static_cast<double>(width);
  }
  rows_accumulate(loss, 0, acc, nullptr);
}

void launch_mean_squared_error(cudaStream_t s, const float* pred, const float* labels, float* d, float scale,
                               std::size_t rows, std::size_t width, double* acc) {
  if (rows == 0 || width == 0) return;
  const float k = 2.f * scale / static_cast<float>(width);  // as the host: one rounding per step
  mse_kernel<<<blocks_for_rows(rows), block_threads, 0, s>>>(pred, labels, d, k, rows, width, acc);
  check_launch("mse_kernel");
}

//! Adds this block's counts (one value per thread) to *acc and *invalid; a
//! thread whose row was `nan` (its prediction held a NaN) makes *acc NaN.
__device__ inline void count_accumulate(bool hit, bool bad, double* acc, double* invalid, bool nan = false) {
  const int hits = __syncthreads_count(hit);
  const int bads = __syncthreads_count(bad);
  const int nans = __syncthreads_count(nan);
  if (threadIdx.x == 0)
    bodies::add_counts([](double* to, double v) { atomicAdd(to, v); }, hits, bads, nans, acc, invalid);
}

__global__ void sparse_hits_kernel(const float* pred, const float* labels, std::size_t rows, std::size_t classes,
                                   double* acc, double* invalid) {
  const std::size_t i = global_index();
  const bodies::RowHit r = i < rows ? bodies::sparse_hit_row(pred + i * classes, labels[i], classes)
                                    : bodies::RowHit{false, false, false};
  count_accumulate(r.hit, r.bad, acc, invalid, r.nan);
}

void launch_sparse_hits(cudaStream_t s, const float* pred, const float* labels, std::size_t rows,
                        std::size_t classes, double* acc, double* invalid) {
  if (rows == 0 || classes == 0) return;
  sparse_hits_kernel<<<blocks_exact(rows), block_threads, 0, s>>>(
      pred, labels, rows, classes, acc, invalid);
  check_launch("sparse_hits_kernel");
}

__global__ void categorical_hits_kernel(const float* pred, const float* labels, std::size_t rows,
                                        std::size_t classes, double* acc) {
  const std::size_t i = global_index();
  const bool nan = i < rows && bodies::has_nan(pred + i * classes, classes);
  const bool hit = i < rows && !nan && bodies::argmax_first(pred + i * classes, classes) ==
                                           bodies::argmax_first(labels + i * classes, classes);
  count_accumulate(hit, false, acc, nullptr, nan);
}

void launch_categorical_hits(cudaStream_t s, const float* pred, const float* labels, std::size_t rows,
                             std::size_t classes, double* acc) {
  if (rows == 0 || classes == 0) return;
  categorical_hits_kernel<<<blocks_exact(rows), block_threads, 0, s>>>(
      pred, labels, rows, classes, acc);
  check_launch("categorical_hits_kernel");
}

__global__ void binary_hits_kernel(const float* pred, const float* labels, std::size_t n, double* acc) {
  const std::size_t i = global_index();
  const bool nan = i < n && pred[i] != pred[i];
  const bool hit = i < n && !nan && bodies::binary_hit(pred[i], labels[i]);
  count_accumulate(hit, false, acc, nullptr, nan);
}

void launch_binary_hits(cudaStream_t s, const float* pred, const float* labels, std::size_t n, double* acc) {
  if (n == 0) return;
  binary_hits_kernel<<<blocks_exact(n), block_threads, 0, s>>>(
      pred, labels, n, acc);
  check_launch("binary_hits_kernel");
}

}  // namespace strata::cuda::detail
