#pragma once
//! The bodies of the reductions a GPU computes without atomics on floats:
//! the column sums (a fixed partition of the rows into chunks; in a chunk,
//! column_lanes threads per column each sum every column_lanes-th row, and
//! the lanes' sums are added in order) and one thread's share of the
//! non-finite count. cuda/kernels/reductions.cuh runs them on a GPU,
//! kernels/host/grid_loops.hpp on a GPU's stand-in; the host's own
//! column_sums adds the rows in order (host/maps.hpp), within rounding.
//!   const float s = strata::kernels::bodies::column_lane_sum(x, cols, col, r0, r1, lane);
//!   const int bad = strata::kernels::bodies::nonfinite_strided(x, n, first, stride);

#include <cstddef>

#include <strata/kernels/bodies/hd.hpp>

namespace strata::kernels::bodies {

constexpr unsigned column_tile = 32;   // columns per block: one coalesced 128-byte row segment
constexpr unsigned column_lanes = 8;   // threads per column, each summing every 8th row of the chunk
constexpr std::size_t min_rows_per_chunk = 512;

//! Rows per chunk of a column sum over `rows` rows: at least 512, and at most 65535 chunks (one grid).
STRATA_HD inline std::size_t column_chunk_rows(std::size_t rows) {
  const std::size_t spread = (rows + 65534) / 65535;
  return spread > min_rows_per_chunk ? spread : min_rows_per_chunk;
}

//! One lane's sum of column `col` of x (`cols` wide) over the rows r0 + lane, r0 + lane + column_lanes, ... < r1.
STRATA_HD inline float column_lane_sum(const float* x, std::size_t cols, std::size_t col, std::size_t r0,
                                       std::size_t r1, unsigned lane) {
  float s = 0.f;
  for (std::size_t r = r0 + lane; r < r1; r += column_lanes) s = add(s, x[r * cols + col]);
  return s;
}

//! The chunk's column sum: the lanes' sums part[0], part[stride], ... added in lane order.
STRATA_HD inline float column_lanes_total(const float* part, std::size_t stride) {
  float t = part[0];
  for (unsigned k = 1; k < column_lanes; ++k) t = add(t, part[k * stride]);
  return t;
}

//! Whether v is finite (v - v is 0 for a number, NaN for an infinity or a NaN).
STRATA_HD inline bool is_finite(float v) { return sub(v, v) == 0.f; }

//! How many of x[first], x[first + stride], ... (below n) are NaN or infinite: one thread's share of the count.
STRATA_HD inline int nonfinite_strided(const float* x, std::size_t n, std::size_t first, std::size_t stride) {
  int bad = 0;
  for (std::size_t i = first; i < n; i += stride) bad += !is_finite(x[i]);
  return bad;
}

}  // namespace strata::kernels::bodies
