#pragma once
//! Layer normalization of one row, forward and backward, written once for
//! every backend against a lane policy (bodies/rows.hpp): the host runs a
//! row with HostLanes, a GPU with one warp (WarpLanes); the sums meet in the
//! same butterfly, every other operation is rounded on its own, so the
//! results are the same bits in both places.
//!   strata::kernels::bodies::layer_norm_row(HostLanes{}, x, gamma, beta, y, xhat, &rstd, cols, 1e-3f);
//!
//! Forward: mean = sum(x) / n; var = sum((x - mean)^2) / n (two passes: no
//! cancellation); rstd = 1 / sqrt(var + eps); xhat = (x - mean) * rstd;
//! y = xhat * (1 + gamma) + beta: gamma is the scale's offset from 1, so a
//! layer's zero-initialized gamma starts as the identity scale.
//! Backward, with g = dy * (1 + gamma): dx = rstd * (g - sum(g) / n - xhat *
//! sum(g * xhat) / n); dgamma_rows = dy * xhat (summed over rows by the caller).

#include <cstddef>

#include <strata/kernels/bodies/rows.hpp>

namespace strata::kernels::bodies {

template <class Lanes>
STRATA_HD void layer_norm_row(const Lanes& lanes, const float* x, const float* gamma, const float* beta, float* y,
                              float* xhat, float* rstd_out, std::size_t n, float eps) {
  const auto count = static_cast<float>(n);
  const float mean = div(lanes.sum([&](unsigned l) { return lane_sum(l, n, [&](std::size_t j) { return x[j]; }); }),
                         count);
  const float var = div(lanes.sum([&](unsigned l) {
                          return lane_sum(l, n, [&](std::size_t j) {
                            const float d = sub(x[j], mean);
                            return mul(d, d);
                          });
                        }),
                        count);
  const float rstd = div(1.f, sqrt(add(var, eps)));
  for (std::size_t j = lanes.first(); j < n; j += lanes.step()) {
    const float h = mul(sub(x[j], mean), rstd);
    xhat[j] = h;
    y[j] = add(mul(h, add(1.f, gamma[j])), beta[j]);
  }
  if (lanes.first() == 0) *rstd_out = rstd;
}

template <class Lanes>
STRATA_HD void layer_norm_backward_row(const Lanes& lanes, const float* dy, const float* xhat, float rstd,
                                       const float* gamma, float* dx, float* dgamma_rows, std::size_t n) {
  const auto count = static_cast<float>(n);
  const float mean_g = div(
      lanes.sum([&](unsigned l) { return lane_sum(l, n, [&](std::size_t j) { return mul(dy[j], add(1.f, gamma[j])); }); }),
      count);
  const float mean_gh = div(lanes.sum([&](unsigned l) {
                              return lane_sum(l, n, [&](std::size_t j) { return mul(mul(dy[j], add(1.f, gamma[j])), xhat[j]); });
                            }),
                            count);
  for (std::size_t j = lanes.first(); j < n; j += lanes.step()) {
    dgamma_rows[j] = mul(dy[j], xhat[j]);
    if (dx) dx[j] = mul(rstd, sub(sub(mul(dy[j], add(1.f, gamma[j])), mean_g), mul(xhat[j], mean_gh)));
  }
}

}  // namespace strata::kernels::bodies
