#pragma once
//! The CUDA kernels' launch geometry, where the bodies and a GPU's stand-in
//! (kernels/host/grid_loops.hpp) see it too: threads per block, rows per
//! block of the one-warp-per-row kernels, the block count of the
//! grid-stride kernels, and the in-order sum by which a block's thread 0
//! adds up its warps' values. cuda/kernels/common.cuh launches with these.
//!   const unsigned blocks = std::min(strata::kernels::bodies::blocks_for(n), strata::kernels::bodies::reduce_blocks);
//!   const double block = strata::kernels::bodies::in_order_sum(warp_losses, strata::kernels::bodies::warps_per_block);

#include <cstddef>

#include <strata/kernels/bodies/hd.hpp>

namespace strata::kernels::bodies {

//! Threads per block of the elementwise and per-row kernels.
constexpr unsigned block_threads = 256;
//! Rows per block of the one-warp-per-row kernels (one warp per row).
constexpr unsigned warps_per_block = block_threads / 32;
//! Blocks of the grid-stride reductions (the square sum, the non-finite count).
constexpr unsigned reduce_blocks = 1024;

//! Blocks for `n` items at `per_block` items per block, capped at 2^16 (the kernels loop).
constexpr unsigned blocks_for(std::size_t n, std::size_t per_block = block_threads) {
  const std::size_t b = (n + per_block - 1) / per_block, cap = std::size_t{1} << 16;
  return static_cast<unsigned>(b < cap ? b : cap);
}

//! v[0] + v[1] + ... + v[n - 1], added in order from 0.
STRATA_HD inline double in_order_sum(const double* v, unsigned n) {
  double t = 0;
  for (unsigned i = 0; i < n; ++i) t += v[i];
  return t;
}

}  // namespace strata::kernels::bodies
