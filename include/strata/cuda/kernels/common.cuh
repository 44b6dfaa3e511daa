#pragma once
//! What the CUDA kernel files share: launch geometry, the launch check, and
//! device helpers (warp reductions, the warp as a row's lanes, Thrust's
//! for_each over an element body); the bodies themselves are in
//! kernels/bodies/, shared with the host. nvcc
//! only: included through include/strata/cuda/strata_cuda.cu.
//!   const unsigned blocks = strata::cuda::detail::blocks_for(n);
//!   my_kernel<<<blocks, strata::cuda::detail::block_threads, 0, s>>>(...);  check_launch("my_kernel");

#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/error.h>
#include <thrust/system_error.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include <strata/cuda/error.hpp>
#include <strata/cuda/launch.hpp>
#include <strata/kernels/bodies/grid.hpp>
#include <strata/kernels/bodies/hd.hpp>
#include <strata/kernels/bodies/rows.hpp>

namespace strata::cuda::detail {

namespace bodies = kernels::bodies;

// Threads per block, rows per block of the warp-per-row kernels, the capped
// block count of the grid-stride kernels: bodies/grid.hpp (a GPU's stand-in
// plays the same grid).
using bodies::block_threads;
using bodies::blocks_for;
using bodies::reduce_blocks;
using bodies::warps_per_block;

//! Blocks for one thread per item (no cap: kernels without a grid-stride loop).
inline unsigned blocks_exact(std::size_t n, std::size_t per_block = block_threads) {
  const std::size_t b = (n + per_block - 1) / per_block;
  if (b > 0x7fffffffu) throw ShapeError("strata CUDA kernels: " + std::to_string(n) + " rows exceed one grid");
  return static_cast<unsigned>(b);
}
//! Blocks for one warp per row.
inline unsigned blocks_for_rows(std::size_t rows) { return blocks_exact(rows, warps_per_block); }

//! Throws CudaError naming `kernel` if its launch failed.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

//! The element index of this thread and the grid's stride.
__device__ inline std::size_t global_index() { return std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; }
__device__ inline std::size_t grid_stride() { return std::size_t{gridDim.x} * blockDim.x; }

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

//! The lanes of a row for the per-row bodies (kernels/bodies/rows.hpp):
//! one warp per row, each lane summing every 32nd element, the lane sums
//! meeting in warp_sum's butterfly (HostLanes' order, so the same bits).
struct WarpLanes {
  unsigned lane;
  template <class Partial>
  __device__ float sum(Partial&& partial) const {
    return warp_sum(partial(lane));
  }
  template <class Partial>
  __device__ float max(Partial&& partial) const {
    return warp_max(partial(lane));
  }
  template <class Partial>
  __device__ bool any(Partial&& partial) const {
    return __any_sync(0xffffffffu, partial(lane));
  }
  [[nodiscard]] __device__ std::size_t first() const { return lane; }
  [[nodiscard]] __device__ std::size_t step() const { return bodies::row_lanes; }
};

//! Runs f(i) for every i in [0, n) on stream `s` (Thrust's for_each over a
//! counting iterator; no synchronization, no allocation, so a CUDA graph
//! can capture it), then checks the launch. `f` is an element body
//! (kernels/bodies/) bound to its pointers: a struct with a __device__
//! (or STRATA_HD) operator()(std::size_t).
//! Thrust reports a failure as thrust::system_error: it becomes a
//! strata::CudaError naming `what` (the body's kernel) and Thrust's status.
template <class F>
void for_each_index(cudaStream_t s, std::size_t n, const F& f, const char* what) {
  if (n == 0) return;
  try {
    thrust::for_each_n(thrust::cuda::par_nosync.on(s), thrust::counting_iterator<std::size_t>(0), n, f);
  } catch (const thrust::system_error& e) {
    const auto status = static_cast<cudaError_t>(e.code().value());
    if (e.code().category() == thrust::cuda_category()) consume_error(status);
    throw CudaError(std::string("thrust::for_each_n (") + what + ")", e.what(),
                    std::string("CUDA call thrust::for_each_n (") + what + ") failed on device " +
                        std::to_string(current_device_or_minus_one()) + ": " + e.what());
  }
  check_launch(what);
}

//! Adds `v` to *acc once per block (lane 0 of warp `w` has put its value in
//! shared[w]); thread 0 sums the warps in order. Non-deterministic across
//! blocks (atomic), as kernels::Compute documents.
__device__ inline void block_accumulate(double* shared, double* acc) {
  __syncthreads();
  if (threadIdx.x == 0 && acc) atomicAdd(acc, bodies::in_order_sum(shared, blockDim.x / 32));
}

}  // namespace strata::cuda::detail
