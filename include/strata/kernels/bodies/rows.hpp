#pragma once
//! Per-row bodies that reduce over a row are written once against a lane
//! policy: 32 lanes each sum every 32nd element of the row, then the lane
//! sums meet in a butterfly (lane l adds lane l ^ 16, l ^ 8, ..., l ^ 1). On a
//! GPU one warp runs a row (cuda/kernels/rows.cuh: WarpLanes); on the host
//! HostLanes runs the 32 lanes one after the other and the same butterfly
//! on an array, so a row's sums are the same bits in both places.
//!   const float total = lanes.sum([&](unsigned l) { float s = 0.f; for (j = l; j < n; j += row_lanes) s = add(s, x[j]); return s; });
//!   for (std::size_t j = lanes.first(); j < n; j += lanes.step()) y[j] = ...;   // the row's elements, each once
//!   const float top = lanes.max([&](unsigned l) { return lane_max(l, n, [&](std::size_t j) { return x[j]; }); });
//!   const bool nan = lanes.any([&](unsigned l) { return lane_any(l, n, [&](std::size_t j) { return is_nan(x[j]); }); });

#include <cstddef>

#include <strata/kernels/bodies/hd.hpp>

namespace strata::kernels::bodies {

//! The lanes of a row (a warp's width).
constexpr unsigned row_lanes = 32;

//! The butterfly of 32 lane values, as a warp's __shfl_xor_sync reduction
//! computes it: after it every lane holds the same sum.
inline float butterfly_sum(float (&v)[row_lanes]) {
  for (unsigned o = row_lanes / 2; o > 0; o >>= 1) {
    float next[row_lanes];
    for (unsigned l = 0; l < row_lanes; ++l) next[l] = v[l] + v[l ^ o];
    for (unsigned l = 0; l < row_lanes; ++l) v[l] = next[l];
  }
  return v[0];
}

//! The host's lanes: one thread plays all 32.
struct HostLanes {
  //! The row total of partial(l) over the lanes l.
  template <class Partial>
  float sum(Partial&& partial) const {
    float v[row_lanes];
    for (unsigned l = 0; l < row_lanes; ++l) v[l] = partial(l);
    return butterfly_sum(v);
  }
  //! The row maximum of partial(l) over the lanes l (fmax: order does not matter).
  template <class Partial>
  float max(Partial&& partial) const {
    float m = partial(0u);
    for (unsigned l = 1; l < row_lanes; ++l) m = fmax(m, partial(l));
    return m;
  }
  //! Whether partial(l) holds for some lane l.
  template <class Partial>
  bool any(Partial&& partial) const {
    bool found = false;
    for (unsigned l = 0; l < row_lanes; ++l) found = found || partial(l);
    return found;
  }
  //! This caller's share of a row's elements: all of them.
  [[nodiscard]] std::size_t first() const { return 0; }
  [[nodiscard]] std::size_t step() const { return 1; }
};

//! s + x[l] + x[l + 32] + ... over x[0, n): one lane's partial sum of term(j).
template <class Term>
STRATA_HD float lane_sum(unsigned lane, std::size_t n, Term&& term) {
  float s = 0.f;
  for (std::size_t j = lane; j < n; j += row_lanes) s = add(s, term(j));
  return s;
}

//! The maximum of term(j) over j = l, l + 32, ... < n (-infinity for none): one lane's partial maximum.
template <class Term>
STRATA_HD float lane_max(unsigned lane, std::size_t n, Term&& term) {
  float m = -INFINITY;
  for (std::size_t j = lane; j < n; j += row_lanes) m = fmax(m, term(j));
  return m;
}

//! Whether test(j) holds for some j = l, l + 32, ... < n: one lane's share of a row's test.
template <class Test>
STRATA_HD bool lane_any(unsigned lane, std::size_t n, Test&& test) {
  bool found = false;
  for (std::size_t j = lane; j < n; j += row_lanes) found = found || test(j);
  return found;
}

}  // namespace strata::kernels::bodies
