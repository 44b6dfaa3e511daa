#pragma once
//! A CUDA kernel's grid played on the host, one thread after another: the
//! loops by which DeviceStandIn (host/device_stand_in.hpp) runs the bodies
//! of the sparse cross-entropy and the accuracy count (bodies/losses.hpp),
//! the column sums and the non-finite count (bodies/reductions.hpp) over
//! the rows, lanes, blocks and chunks of cuda/kernels/losses.cuh and
//! reductions.cuh. A block's sum is added to the total as a GPU's atomic
//! add does, blocks in order (a GPU takes them in any order). A label that
//! names no class is counted into *invalid, as on a GPU (the host throws).
//!   double loss = 0, invalid = 0;
//!   strata::kernels::host::grid_sparse_crossentropy(p, y, d, 1.f / b, b, 10, true, &loss, &invalid);
//! Within rounding of the host's own loops (host/losses.hpp, host/maps.hpp):
//! the rows and columns are summed in a GPU's order. The counts are exact.

#include <algorithm>
#include <cstddef>
#include <vector>

#include <strata/kernels/bodies/grid.hpp>
#include <strata/kernels/bodies/losses.hpp>
#include <strata/kernels/bodies/reductions.hpp>
#include <strata/kernels/bodies/rows.hpp>

namespace strata::kernels::host {

//! sparse_xent_kernel's grid: warps_per_block rows per block, one row per warp (HostLanes plays its lanes).
inline void grid_sparse_crossentropy(const float* pred, const float* labels, float* d, float scale,
                                     std::size_t rows, std::size_t classes, bool from_logits, double* acc,
                                     double* invalid) {
  constexpr unsigned warps = bodies::warps_per_block;
  for (std::size_t first = 0; first < rows; first += warps) {
    double loss[warps] = {}, bad[warps] = {};
    for (unsigned w = 0; w < warps && first + w < rows; ++w) {
      const std::size_t row = first + w;
      const float* p = pred + row * classes;
      float* g = d ? d + row * classes : nullptr;
      bool b = false;
      loss[w] = from_logits
                    ? bodies::sparse_xent_row<true>(bodies::HostLanes{}, p, labels[row], g, scale, classes, b)
                    : bodies::sparse_xent_row<false>(bodies::HostLanes{}, p, labels[row], g, scale, classes, b);
      bad[w] = b ? 1 : 0;
    }
    if (acc) *acc += bodies::in_order_sum(loss, warps);
    if (invalid) *invalid += bodies::in_order_sum(bad, warps);
  }
}

//! sparse_hits_kernel's grid: one row per thread, block_threads rows per block.
inline void grid_sparse_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes,
                             double* acc, double* invalid) {
  if (classes == 0) return;
  for (std::size_t first = 0; first < rows; first += bodies::block_threads) {
    int hits = 0, bads = 0, nans = 0;
    for (std::size_t i = first; i < std::min(rows, first + bodies::block_threads); ++i) {
      const bodies::RowHit r = bodies::sparse_hit_row(pred + i * classes, labels[i], classes);
      hits += r.hit;
      bads += r.bad;
      nans += r.nan;
    }
    bodies::add_counts([](double* to, double v) { *to += v; }, hits, bads, nans, acc, invalid);
  }
}

//! launch_column_sums: each chunk's column sums from column_lanes lane sums; more than one chunk, the
//! chunks' sums summed the same way.
inline void grid_column_sums(const float* x, float* out, std::size_t rows, std::size_t cols) {
  if (cols == 0) return;
  if (rows == 0) {
    std::fill_n(out, cols, 0.f);
    return;
  }
  const std::size_t per_chunk = bodies::column_chunk_rows(rows);
  const std::size_t chunks = (rows + per_chunk - 1) / per_chunk;
  std::vector<float> partial(chunks > 1 ? chunks * cols : 0);
  float* to = chunks > 1 ? partial.data() : out;
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t r0 = c * per_chunk, r1 = std::min(rows, r0 + per_chunk);
    for (std::size_t col = 0; col < cols; ++col) {
      float part[bodies::column_lanes];
      for (unsigned lane = 0; lane < bodies::column_lanes; ++lane)
        part[lane] = bodies::column_lane_sum(x, cols, col, r0, r1, lane);
      to[c * cols + col] = bodies::column_lanes_total(part, 1);
    }
  }
  if (chunks > 1) grid_column_sums(partial.data(), out, chunks, cols);
}

//! count_nonfinite_kernel's grid: reduce_blocks blocks at most, each thread counting every stride-th element.
inline void grid_count_nonfinite(const float* x, std::size_t n, double* acc) {
  if (n == 0) return;
  const std::size_t blocks = std::min(bodies::blocks_for(n), bodies::reduce_blocks);
  const std::size_t stride = blocks * bodies::block_threads;
  for (std::size_t b = 0; b < blocks; ++b) {
    int total = 0;
    for (std::size_t t = b * bodies::block_threads; t < (b + 1) * bodies::block_threads; ++t)
      total += bodies::nonfinite_strided(x, n, t, stride);
    if (total) *acc += static_cast<double>(total);
  }
}

}  // namespace strata::kernels::host
