#pragma once
//! Host image operations of the compute vocabulary (kernels/compute.hpp):
//! im2col / col2im for convolutions, max pooling and its gradient, over
//! NHWC images described by a Window2D. The window arithmetic and pooling's
//! rule are the bodies the CUDA kernels use (kernels/bodies/windows.hpp);
//! im2col and col2im keep their row-at-a-time copies (the host's fast path).
//!   strata::kernels::host::im2col(g, x, col);   // col: [batch * oh * ow, kh * kw * c]
//! Deterministic: fixed order.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <strata/kernels/bodies/windows.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::kernels::host {

//! Calls visit(col_offset, input_offset, first, last) for every kernel row of
//! every window: columns [first, last) of that kernel row lie inside the
//! image and start at input_offset (first = last = 0: the row is padding).
template <class Visit>
void for_each_window_row(const Window2D& g, Visit&& visit) {
  using Index = std::ptrdiff_t;
  const auto h = static_cast<Index>(g.h), w = static_cast<Index>(g.w), kw = static_cast<Index>(g.kw);
  std::size_t col = 0;
  for (std::size_t b = 0; b < g.batch; ++b) {
    const std::size_t image = b * g.h * g.w * g.c;
    for (std::size_t oh = 0; oh < g.oh; ++oh) {
      const Index ih0 = static_cast<Index>(oh * g.sh) - static_cast<Index>(g.pad_top);
      for (std::size_t ow = 0; ow < g.ow; ++ow) {
        const Index iw0 = static_cast<Index>(ow * g.sw) - static_cast<Index>(g.pad_left);
        const Index first = std::max<Index>(0, -iw0);
        const Index last = std::clamp<Index>(w - iw0, first, kw);
        for (std::size_t i = 0; i < g.kh; ++i, col += g.kw * g.c) {
          const Index ih = ih0 + static_cast<Index>(i);
          if (ih < 0 || ih >= h) {
            visit(col, std::size_t{0}, std::size_t{0}, std::size_t{0});
            continue;
          }
          const auto pixel = static_cast<std::size_t>(ih * w + iw0 + first);
          visit(col, image + pixel * g.c, static_cast<std::size_t>(first), static_cast<std::size_t>(last));
        }
      }
    }
  }
}

inline void im2col(const Window2D& g, const float* x, float* col) {
  const std::size_t run = g.kw * g.c;
  for_each_window_row(g, [&](std::size_t at, std::size_t from, std::size_t first, std::size_t last) {
    float* row = col + at;
    std::fill(row, row + first * g.c, 0.f);
    std::copy(x + from, x + from + (last - first) * g.c, row + first * g.c);
    std::fill(row + last * g.c, row + run, 0.f);
  });
}

inline void col2im(const Window2D& g, const float* col, float* dx) {
  std::fill_n(dx, g.batch * g.h * g.w * g.c, 0.f);
  for_each_window_row(g, [&](std::size_t at, std::size_t to, std::size_t first, std::size_t last) {
    const float* row = col + at + first * g.c;
    float* dst = dx + to;
    const std::size_t len = (last - first) * g.c;
    for (std::size_t e = 0; e < len; ++e) dst[e] += row[e];
  });
}

inline void max_pool(const Window2D& g, const float* in, float* out, std::uint32_t* arg) {
  const std::size_t c_ = g.c;
  for (std::size_t b = 0; b < g.batch; ++b) {
    const std::size_t image = b * g.h * g.w * c_;
    for (std::size_t oh = 0; oh < g.oh; ++oh) {
      const auto [i0, i1] = bodies::clip_window(oh * g.sh, g.pad_top, g.kh, g.h);
      for (std::size_t ow = 0; ow < g.ow; ++ow, out += c_, arg += c_) {
        const auto [j0, j1] = bodies::clip_window(ow * g.sw, g.pad_left, g.kw, g.w);
        bool seeded = false;
        for (std::size_t i = i0; i < i1; ++i)
          for (std::size_t j = j0; j < j1; ++j) {
            const auto at = static_cast<std::uint32_t>((i * g.w + j) * c_);
            const float* v = in + image + at;
            if (!seeded) {
              for (std::size_t c = 0; c < c_; ++c) out[c] = v[c], arg[c] = at + static_cast<std::uint32_t>(c);
              seeded = true;
              continue;
            }
            for (std::size_t c = 0; c < c_; ++c) {
              const bool take = bodies::pool_takes(v[c], out[c]);
              out[c] = take ? v[c] : out[c];
              arg[c] = take ? at + static_cast<std::uint32_t>(c) : arg[c];
            }
          }
      }
    }
  }
}

inline void max_pool_backward(const Window2D& g, const float* dy, const std::uint32_t* argmax, float* dx) {
  const std::size_t per_out = g.oh * g.ow * g.c, per_in = g.h * g.w * g.c;
  std::fill_n(dx, g.batch * per_in, 0.f);
  for (std::size_t b = 0; b < g.batch; ++b, dx += per_in, dy += per_out)
    for (std::size_t o = 0; o < per_out; ++o) dx[argmax[b * per_out + o]] += dy[o];
}

}  // namespace strata::kernels::host
