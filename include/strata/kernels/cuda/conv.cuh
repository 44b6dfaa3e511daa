#pragma once
//! Image kernels over NHWC batches (kernels::Window2D): im2col, its adjoint
//! col2im, and max pooling with its gradient. The two adjoints are written
//! as gathers (each input element sums its own contributions, windows in
//! row-major order) rather than scattered atomic adds, so they are
//! deterministic and add in the host's order: all four are bitwise equal to
//! the host's.
//!   strata::cuda::detail::launch_im2col(s, g, x, col);        // col: [batch*oh*ow, kh*kw*c]
//!   strata::cuda::detail::launch_max_pool(s, g, x, y, argmax);

#include <strata/kernels/cuda/common.cuh>

namespace strata::cuda::detail {

__global__ void im2col_kernel(Window2D g, const float* x, float* col, std::size_t total) {
  const std::size_t row_len = g.kw * g.c, patch = g.kh * row_len;
  for (std::size_t e = global_index(); e < total; e += grid_stride()) {
    const std::size_t r = e / patch, q = e % patch;
    const std::size_t i = q / row_len, j = (q % row_len) / g.c, ch = q % g.c;
    const std::size_t ow = r % g.ow, oh = (r / g.ow) % g.oh, b = r / (g.ow * g.oh);
    const auto ih = static_cast<long long>(oh * g.sh + i) - static_cast<long long>(g.pad_top);
    const auto iw = static_cast<long long>(ow * g.sw + j) - static_cast<long long>(g.pad_left);
    const bool inside =
        ih >= 0 && iw >= 0 && static_cast<std::size_t>(ih) < g.h && static_cast<std::size_t>(iw) < g.w;
    col[e] = inside ? x[((b * g.h + static_cast<std::size_t>(ih)) * g.w + static_cast<std::size_t>(iw)) * g.c + ch]
                    : 0.f;
  }
}

void launch_im2col(cudaStream_t s, const Window2D& g, const float* x, float* col) {
  const std::size_t total = g.batch * g.oh * g.ow * g.kh * g.kw * g.c;
  if (total == 0) return;
  im2col_kernel<<<blocks_for(total), block_threads, 0, s>>>(g, x, col, total);
  check_launch("im2col_kernel");
}

//! The windows [lo, hi] (inclusive; lo > hi: none) along one axis whose
//! taps at stride `st` with `k` taps reach padded position `p` = index + pad.
__device__ inline void windows_reaching(std::size_t p, std::size_t k, std::size_t st, std::size_t out,
                                        std::size_t& lo, std::size_t& hi) {
  lo = p + 1 > k ? (p + 1 - k + st - 1) / st : 0;
  hi = p / st;
  if (hi + 1 > out) hi = out - 1;  // out >= 1 whenever there is work
}

__global__ void col2im_kernel(Window2D g, const float* col, float* dx, std::size_t total) {
  const std::size_t row_len = g.kw * g.c, patch = g.kh * row_len;
  for (std::size_t e = global_index(); e < total; e += grid_stride()) {
    const std::size_t ch = e % g.c, iw = (e / g.c) % g.w, ih = (e / (g.c * g.w)) % g.h, b = e / (g.c * g.w * g.h);
    std::size_t oh0, oh1, ow0, ow1;
    windows_reaching(ih + g.pad_top, g.kh, g.sh, g.oh, oh0, oh1);
    windows_reaching(iw + g.pad_left, g.kw, g.sw, g.ow, ow0, ow1);
    float sum = 0.f;
    for (std::size_t oh = oh0; oh <= oh1 && oh0 <= oh1; ++oh) {
      const std::size_t i = ih + g.pad_top - oh * g.sh;
      for (std::size_t ow = ow0; ow <= ow1 && ow0 <= ow1; ++ow) {
        const std::size_t j = iw + g.pad_left - ow * g.sw;
        sum += col[((b * g.oh + oh) * g.ow + ow) * patch + i * row_len + j * g.c + ch];
      }
    }
    dx[e] = sum;
  }
}

void launch_col2im(cudaStream_t s, const Window2D& g, const float* col, float* dx) {
  const std::size_t total = g.batch * g.h * g.w * g.c;
  if (total == 0) return;
  if (g.oh == 0 || g.ow == 0) return launch_fill(s, dx, 0.f, total);
  col2im_kernel<<<blocks_for(total), block_threads, 0, s>>>(g, col, dx, total);
  check_launch("col2im_kernel");
}

//! The input indices [first, last) a window starting at padded position
//! `start` covers along an axis of `extent` (MaxPool2D::clip).
__device__ inline void clip(std::size_t start, std::size_t pad, std::size_t k, std::size_t extent, std::size_t& first,
                            std::size_t& last) {
  first = start > pad ? start - pad : 0;
  last = start + k > pad ? start + k - pad : 0;
  first = first < extent ? first : extent;
  last = last < extent ? last : extent;
}

__global__ void max_pool_kernel(Window2D g, const float* x, float* y, std::uint32_t* argmax, std::size_t total) {
  for (std::size_t e = global_index(); e < total; e += grid_stride()) {
    const std::size_t ch = e % g.c, ow = (e / g.c) % g.ow, oh = (e / (g.c * g.ow)) % g.oh,
                      b = e / (g.c * g.ow * g.oh);
    const float* image = x + b * g.h * g.w * g.c;
    std::size_t i0, i1, j0, j1;
    clip(oh * g.sh, g.pad_top, g.kh, g.h, i0, i1);
    clip(ow * g.sw, g.pad_left, g.kw, g.w, j0, j1);
    // Same padding never yields an empty window, so the first tap seeds the maximum.
    float best = 0.f;
    std::uint32_t arg = 0;
    bool seeded = false;
    for (std::size_t i = i0; i < i1; ++i)
      for (std::size_t j = j0; j < j1; ++j) {
        const auto at = static_cast<std::uint32_t>((i * g.w + j) * g.c + ch);
        const float v = image[at];
        // Strictly greater keeps the first maximum on ties; a NaN wins.
        if (!seeded || v > best || v != v) {
          best = v;
          arg = at;
          seeded = true;
        }
      }
    y[e] = best;
    argmax[e] = arg;
  }
}

void launch_max_pool(cudaStream_t s, const Window2D& g, const float* x, float* y, std::uint32_t* argmax) {
  const std::size_t total = g.batch * g.oh * g.ow * g.c;
  if (total == 0) return;
  max_pool_kernel<<<blocks_for(total), block_threads, 0, s>>>(g, x, y, argmax, total);
  check_launch("max_pool_kernel");
}

//! One thread per input element: the sum of dy over the windows whose
//! maximum it was, windows in row-major order (the host's order).
__global__ void max_pool_backward_kernel(Window2D g, const float* dy, const std::uint32_t* argmax, float* dx,
                                         std::size_t total) {
  for (std::size_t e = global_index(); e < total; e += grid_stride()) {
    const std::size_t ch = e % g.c, iw = (e / g.c) % g.w, ih = (e / (g.c * g.w)) % g.h, b = e / (g.c * g.w * g.h);
    const auto self = static_cast<std::uint32_t>((ih * g.w + iw) * g.c + ch);
    std::size_t oh0, oh1, ow0, ow1;
    windows_reaching(ih + g.pad_top, g.kh, g.sh, g.oh, oh0, oh1);
    windows_reaching(iw + g.pad_left, g.kw, g.sw, g.ow, ow0, ow1);
    float sum = 0.f;
    for (std::size_t oh = oh0; oh <= oh1 && oh0 <= oh1; ++oh)
      for (std::size_t ow = ow0; ow <= ow1 && ow0 <= ow1; ++ow) {
        const std::size_t o = ((b * g.oh + oh) * g.ow + ow) * g.c + ch;
        if (argmax[o] == self) sum += dy[o];
      }
    dx[e] = sum;
  }
}

void launch_max_pool_backward(cudaStream_t s, const Window2D& g, const float* dy, const std::uint32_t* argmax,
                              float* dx) {
  const std::size_t total = g.batch * g.h * g.w * g.c;
  if (total == 0) return;
  if (g.oh == 0 || g.ow == 0) return launch_fill(s, dx, 0.f, total);
  max_pool_backward_kernel<<<blocks_for(total), block_threads, 0, s>>>(g, dy, argmax, dx, total);
  check_launch("max_pool_backward_kernel");
}

}  // namespace strata::cuda::detail
