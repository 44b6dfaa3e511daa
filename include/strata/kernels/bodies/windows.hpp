#pragma once
//! The window arithmetic of convolutions and pooling over NHWC images
//! (kernels::Window2D), shared by the host loops (kernels/host/images.hpp)
//! and the CUDA kernels (cuda/kernels/conv.cuh): which input rows or
//! columns a window covers, which windows reach an input position, and max
//! pooling's rule for a new maximum; and one element of each image op
//! (im2col, col2im, max pooling and its gradient), which the CUDA kernels
//! run per thread and the host's tests compare with the host's row-at-a-
//! time fast paths (layers_test), bit for bit. col2im and the pooling
//! gradient are gathers: each input element sums its own contributions,
//! windows in row-major order (the host's scatter order).
//!   const auto [first, last] = strata::kernels::bodies::clip_window(oh * g.sh, g.pad_top, g.kh, g.h);
//!   for (std::size_t e = 0; e < total; ++e) col[e] = strata::kernels::bodies::im2col_element(g, x, e);

#include <cstddef>

#include <cstdint>

#include <strata/kernels/bodies/hd.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::kernels::bodies {

//! A half-open range of indices along one axis.
struct Span {
  std::size_t first, last;
};

//! The window [start - pad, start - pad + k) clipped to [0, extent).
STRATA_HD inline Span clip_window(std::size_t start, std::size_t pad, std::size_t k, std::size_t extent) {
  std::size_t first = start > pad ? start - pad : 0;
  std::size_t last = start + k > pad ? start + k - pad : 0;
  first = first < extent ? first : extent;
  last = last < extent ? last : extent;
  return {first, last};
}

//! The windows [first, last) along one axis whose k taps at stride `st`
//! reach padded position p = index + pad (out >= 1 windows along the axis).
STRATA_HD inline Span windows_reaching(std::size_t p, std::size_t k, std::size_t st, std::size_t out) {
  const std::size_t lo = p + 1 > k ? (p + 1 - k + st - 1) / st : 0;
  std::size_t hi = p / st;
  if (hi + 1 > out) hi = out - 1;
  return {lo, lo <= hi ? hi + 1 : lo};
}

//! Whether max pooling takes v over the maximum so far: strictly greater
//! (the first maximum wins ties) or NaN (a NaN wins).
STRATA_HD inline bool pool_takes(float v, float best) { return v > best || is_nan(v); }

//! col[e] of im2col: the input under column entry e, 0 in the padding.
STRATA_HD inline float im2col_element(const Window2D& g, const float* x, std::size_t e) {
  const std::size_t row_len = g.kw * g.c, patch = g.kh * row_len;
  const std::size_t r = e / patch, q = e % patch;
  const std::size_t i = q / row_len, j = (q % row_len) / g.c, ch = q % g.c;
  const std::size_t ow = r % g.ow, oh = (r / g.ow) % g.oh, b = r / (g.ow * g.oh);
  const auto ih = static_cast<long long>(oh * g.sh + i) - static_cast<long long>(g.pad_top);
  const auto iw = static_cast<long long>(ow * g.sw + j) - static_cast<long long>(g.pad_left);
  const bool inside = ih >= 0 && iw >= 0 && static_cast<std::size_t>(ih) < g.h && static_cast<std::size_t>(iw) < g.w;
  return inside ? x[((b * g.h + static_cast<std::size_t>(ih)) * g.w + static_cast<std::size_t>(iw)) * g.c + ch] : 0.f;
}

//! dx[e] of col2im: the sum of the column entries that came from input e
//! (g.oh, g.ow >= 1).
STRATA_HD inline float col2im_element(const Window2D& g, const float* col, std::size_t e) {
  const std::size_t row_len = g.kw * g.c, patch = g.kh * row_len;
  const std::size_t ch = e % g.c, iw = (e / g.c) % g.w, ih = (e / (g.c * g.w)) % g.h, b = e / (g.c * g.w * g.h);
  const Span rows = windows_reaching(ih + g.pad_top, g.kh, g.sh, g.oh);
  const Span cols = windows_reaching(iw + g.pad_left, g.kw, g.sw, g.ow);
  float sum = 0.f;
  for (std::size_t oh = rows.first; oh < rows.last; ++oh) {
    const std::size_t i = ih + g.pad_top - oh * g.sh;
    for (std::size_t ow = cols.first; ow < cols.last; ++ow) {
      const std::size_t j = iw + g.pad_left - ow * g.sw;
      sum = add(sum, col[((b * g.oh + oh) * g.ow + ow) * patch + i * row_len + j * g.c + ch]);
    }
  }
  return sum;
}

//! y[e] of max pooling, and in *arg the offset within its image that gave
//! it. Same padding never yields an empty window, so the first tap seeds
//! the maximum.
STRATA_HD inline float max_pool_element(const Window2D& g, const float* x, std::size_t e, std::uint32_t* arg) {
  const std::size_t ch = e % g.c, ow = (e / g.c) % g.ow, oh = (e / (g.c * g.ow)) % g.oh, b = e / (g.c * g.ow * g.oh);
  const float* image = x + b * g.h * g.w * g.c;
  const Span r = clip_window(oh * g.sh, g.pad_top, g.kh, g.h);
  const Span c = clip_window(ow * g.sw, g.pad_left, g.kw, g.w);
  float best = 0.f;
  std::uint32_t at_best = 0;
  bool seeded = false;
  for (std::size_t i = r.first; i < r.last; ++i)
    for (std::size_t j = c.first; j < c.last; ++j) {
      const auto at = static_cast<std::uint32_t>((i * g.w + j) * g.c + ch);
      const float v = image[at];
      if (!seeded || pool_takes(v, best)) {
        best = v;
        at_best = at;
        seeded = true;
      }
    }
  *arg = at_best;
  return best;
}

//! dx[e] of max pooling's gradient: the sum of dy over the windows whose
//! maximum input e was (g.oh, g.ow >= 1).
STRATA_HD inline float max_pool_backward_element(const Window2D& g, const float* dy, const std::uint32_t* argmax,
                                                 std::size_t e) {
  const std::size_t ch = e % g.c, iw = (e / g.c) % g.w, ih = (e / (g.c * g.w)) % g.h, b = e / (g.c * g.w * g.h);
  const auto self = static_cast<std::uint32_t>((ih * g.w + iw) * g.c + ch);
  const Span rows = windows_reaching(ih + g.pad_top, g.kh, g.sh, g.oh);
  const Span cols = windows_reaching(iw + g.pad_left, g.kw, g.sw, g.ow);
  float sum = 0.f;
  for (std::size_t oh = rows.first; oh < rows.last; ++oh)
    for (std::size_t ow = cols.first; ow < cols.last; ++ow) {
      const std::size_t o = ((b * g.oh + oh) * g.ow + ow) * g.c + ch;
      if (argmax[o] == self) sum = add(sum, dy[o]);
    }
  return sum;
}

}  // namespace strata::kernels::bodies
