#pragma once
//! What the CUDA kernel files share: launch geometry, the launch check, and
//! device helpers (warp reductions, the label rule, the Rng's hash). nvcc
//! only: included through include/strata/cuda/strata_cuda.cu.
//!   const unsigned blocks = strata::cuda::detail::blocks_for(n);
//!   my_kernel<<<blocks, strata::cuda::detail::block_threads, 0, s>>>(...);  check_launch("my_kernel");

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <strata/cuda/error.hpp>
#include <strata/cuda/launch.hpp>

namespace strata::cuda::detail {

//! Threads per block of the elementwise kernels (grid-stride loops).
constexpr unsigned block_threads = 256;
//! Rows per block of the warp-per-row kernels (one warp per row).
constexpr unsigned warps_per_block = block_threads / 32;

//! Blocks for `n` items at `per_block` items per block, capped (the kernels loop).
inline unsigned blocks_for(std::size_t n, std::size_t per_block = block_threads) {
  return static_cast<unsigned>(std::min<std::size_t>((n + per_block - 1) / per_block, std::size_t{1} << 16));
}

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

//! std::clamp(v, lo, hi) exactly (a NaN stays NaN; fminf/fmaxf would drop it).
__device__ inline float clamp_like_std(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }

//! The class index a float label names, or -1 when it names none (the
//! host's rule: an integral value in [0, classes)).
__device__ inline long long class_of(float label, std::size_t classes) {
  if (!(label >= 0.f && label < 9.0e18f)) return -1;
  const auto k = static_cast<long long>(label);
  if (static_cast<float>(k) != label || static_cast<std::size_t>(k) >= classes) return -1;
  return k;
}

//! strata::detail::splitmix (core/random.hpp), bit for bit.
__device__ inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

//! The i-th (0-based) uniform of strata::Rng{key}: splitmix(key + C * (i + 1)), top 24 bits.
__device__ inline float rng_uniform(std::uint64_t key, std::size_t i) {
  const std::uint64_t draw = splitmix(key + 0x632BE59BD9B4E019ull * (static_cast<std::uint64_t>(i) + 1));
  return static_cast<float>(draw >> 40) * 0x1.0p-24f;
}

//! Adds `v` to *acc once per block (lane 0 of warp `w` has put its value in
//! shared[w]); thread 0 sums the warps in order. Non-deterministic across
//! blocks (atomic), as kernels::Compute documents.
__device__ inline void block_accumulate(double* shared, double* acc) {
  __syncthreads();
  if (threadIdx.x == 0 && acc) {
    double t = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) t += shared[w];
    atomicAdd(acc, t);
  }
}

}  // namespace strata::cuda::detail
