#pragma once
//! Conv2D: a 2-D convolution over NHWC images, computed like Keras does
//! (cross-correlation: the kernel is not flipped), so weights carry over.
//!   strata::nn::Conv2D conv(32, 3);   // 32 filters of 3x3, stride 1, valid padding
//!   strata::Shape out = conv.build({28, 28, 1});   // [26, 26, 32]

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/blas.hpp>
#include <strata/nn/layer.hpp>
#include <strata/nn/padding.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::nn {

//! How a Conv2D slides its kernel: strides (rows, columns), border padding,
//! and the L2 regularization factor of its kernel (the bias is not regularized).
//!   strata::nn::Conv2DOptions opts{.strides = {2, 2}, .padding = strata::nn::Padding::Same};
//!   strata::nn::Conv2D conv(64, 3, opts);
struct Conv2DOptions {
  std::array<std::size_t, 2> strides{1, 1};
  Padding padding = Padding::Valid;
  float l2 = 0.f;
};

//! A 2-D convolution layer: input [batch, H, W, C], output [batch, OH, OW, filters].
//! Parameters: "kernel" [kh, kw, C, filters] (Glorot uniform) and "bias" [filters] (zeros).
//!   strata::nn::Conv2D conv(16, {3, 5}, {.strides = {1, 2}, .padding = strata::nn::Padding::Same});
//!   conv.build({28, 28, 1});   // then params(), bind(), forward(), backward()
class Conv2D : public detail::LayerBase<Conv2D> {
 public:
  //! `filters` output channels, a square `kernel` x `kernel` window.
  //!   strata::nn::Conv2D conv(32, 3);
  //!   strata::nn::Conv2D same(32, 3, {.padding = strata::nn::Padding::Same});
  Conv2D(std::size_t filters, std::size_t kernel, Conv2DOptions options = {})
      : Conv2D(filters, std::array<std::size_t, 2>{kernel, kernel}, options) {}

  //! `filters` output channels, a `kernel` = {rows, columns} window.
  //!   strata::nn::Conv2D conv(8, {1, 7});
  //!   strata::nn::Conv2D strided(8, {3, 2}, {.strides = {2, 1}});
  Conv2D(std::size_t filters, std::array<std::size_t, 2> kernel, Conv2DOptions options = {})
      : filters_(filters), kh_(kernel[0]), kw_(kernel[1]), opts_(options) {}

  [[nodiscard]] std::string kind() const override { return "Conv2D"; }

  Shape build(const Shape& input) override {
    const std::string what = describe();
    if (filters_ == 0) throw ShapeError(what + ": the number of filters must be positive, got 0");
    if (kh_ == 0 || kw_ == 0)
      throw ShapeError(what + ": the kernel must be at least 1x1, got " + grid(kh_, kw_));
    if (opts_.strides[0] == 0 || opts_.strides[1] == 0)
      throw ShapeError(what + ": strides must be positive, got " + grid(opts_.strides[0], opts_.strides[1]));
    if (!(opts_.l2 >= 0.f) || !std::isfinite(opts_.l2))
      throw Error(what + ": the L2 factor must be finite and >= 0, got " + std::to_string(opts_.l2));
    if (input.rank() != 3)
      throw ShapeError(what + ": expects a per-sample input [height, width, channels] (NHWC without the batch), got " +
                       input.str() + " of rank " + std::to_string(input.rank()) +
                       " (grayscale images are [H, W, 1])");
    if (input[0] == 0 || input[1] == 0 || input[2] == 0)
      throw ShapeError(what + ": the input image " + input.str() + " has an empty extent");
    if (opts_.padding == Padding::Valid && (kh_ > input[0] || kw_ > input[1]))
      throw ShapeError(what + ": the kernel " + grid(kh_, kw_) + " is larger than the " + grid(input[0], input[1]) +
                       " input with valid padding; use a smaller kernel or Padding::Same");
    detail::blas_single_threaded();
    in_ = input;
    h_ = input[0], w_ = input[1], c_ = input[2];
    const auto rows = detail::window_1d(h_, kh_, opts_.strides[0], opts_.padding);
    const auto cols = detail::window_1d(w_, kw_, opts_.strides[1], opts_.padding);
    oh_ = rows.out, ow_ = cols.out, pad_top_ = rows.pad_before, pad_left_ = cols.pad_before;
    out_ = Shape{oh_, ow_, filters_};
    built_ = true;
    col_valid_ = false;
    return out_;
  }

  [[nodiscard]] std::vector<ParamSpec> params() const override {
    require_built("params");
    return {ParamSpec{"kernel", Shape{kh_, kw_, c_, filters_}, Init::GlorotUniform, kh_ * kw_ * c_,
                      kh_ * kw_ * filters_, opts_.l2},
            ParamSpec{"bias", Shape{filters_}, Init::Zeros, 0, 0, 0.f}};
  }

  void bind(std::span<const ParamRef> params) override {
    require_built("bind");
    if (params.size() != 2)
      throw Error(describe() + "::bind: expected 2 parameters (kernel, bias) but got " +
                  std::to_string(params.size()));
    check_ref(params[0], "kernel", patch() * filters_);
    check_ref(params[1], "bias", filters_);
    kernel_ = params[0];
    bias_ = params[1];
  }

  void forward(const Tensor<float>& x, Tensor<float>& y, const RunInfo& /*info*/) override {
    require_bound("forward");
    detail::check_input(describe(), in_, x);
    const std::size_t batch = x.shape()[0];
    detail::resize(y, batch, out_);
    im2col(x);
    const std::size_t m = batch * oh_ * ow_, k = patch(), n = filters_;
    detail::gemm(false, false, m, n, k, 1.f, col_.data(), k, kernel_.value.data(), n, 0.f, y.data(), n);
    const float* b = bias_.value.data();
    float* out = y.data();
    for (std::size_t r = 0; r < m; ++r, out += n)
      for (std::size_t f = 0; f < n; ++f) out[f] += b[f];
  }

  void backward(const Tensor<float>& x, const Tensor<float>& /*y*/, const Tensor<float>& dy,
                Tensor<float>* dx) override {
    require_bound("backward");
    detail::check_input(describe(), in_, x);
    const std::size_t batch = x.shape()[0];
    if (dy.shape().rank() != 4 || dy.shape()[0] != batch || detail::sample_shape(dy.shape()) != out_)
      throw ShapeError(describe() + "::backward: expected dy [" + std::to_string(batch) + ", " +
                       out_.str().substr(1) + " (the output of the forward pass) but got " + dy.shape().str());
    // x is the last forward's input (the interface says so), whose columns
    // are cached; rebuild them only when a backward with dx has reused the
    // buffer since, or when the caller passes some other tensor after all.
    if (!col_valid_ || col_src_ != x.data() || col_batch_ != batch) im2col(x);
    const std::size_t m = batch * oh_ * ow_, k = patch(), n = filters_;
    detail::gemm(true, false, k, n, m, 1.f, col_.data(), k, dy.data(), n, 0.f, kernel_.grad.data(), n);
    float* db = bias_.grad.data();
    std::fill(db, db + n, 0.f);
    const float* g = dy.data();
    for (std::size_t r = 0; r < m; ++r, g += n)
      for (std::size_t f = 0; f < n; ++f) db[f] += g[f];
    if (dx == nullptr) return;
    detail::resize(*dx, batch, in_);
    dx->fill(0.f);
    if (batch == 0) return;
    // The columns are no longer needed: reuse their storage for dL/dcol, which
    // keeps one buffer of this size per replica instead of two.
    col_valid_ = false;
    detail::gemm(false, true, m, k, n, 1.f, dy.data(), n, kernel_.value.data(), n, 0.f, col_.data(), k);
    col2im(*dx);
  }

 private:
  [[nodiscard]] std::size_t patch() const noexcept { return kh_ * kw_ * c_; }

  static std::string grid(std::size_t a, std::size_t b) { return std::to_string(a) + "x" + std::to_string(b); }

  [[nodiscard]] std::string describe() const {
    return "Conv2D(" + std::to_string(filters_) + ", " + grid(kh_, kw_) + ", strides " +
           grid(opts_.strides[0], opts_.strides[1]) + ", " + to_string(opts_.padding) + ")";
  }

  void require_built(const char* call) const {
    if (!built_) throw Error(describe() + "::" + call + ": call build(input shape) first");
  }

  void require_bound(const char* call) const {
    require_built(call);
    if (kernel_.value.size() != patch() * filters_ || bias_.value.size() != filters_)
      throw Error(describe() + "::" + call + ": parameters are not bound; call bind() with storage for params()");
  }

  void check_ref(const ParamRef& ref, const char* name, std::size_t want) const {
    if (ref.value.size() != want || ref.grad.size() != want)
      throw ShapeError(describe() + "::bind: parameter \"" + name + "\" needs " + std::to_string(want) +
                       " values and gradients but got " + std::to_string(ref.value.size()) + " values and " +
                       std::to_string(ref.grad.size()) + " gradients");
  }

  //! Walks every (output pixel, kernel row) pair of a batch in column order:
  //! visit(col_offset, in_offset, first, last) says that kernel columns
  //! [first, last) of that row read the input from `in_offset` on, and the
  //! others read padding (first == last when the whole row is padding).
  //! Channels-last makes those taps one contiguous run of (last - first) * C
  //! floats, so im2col and col2im move whole runs instead of single pixels.
  template <class Visit>
  void for_each_run(std::size_t batch, Visit&& visit) const {
    using Index = std::ptrdiff_t;
    const auto h = static_cast<Index>(h_), w = static_cast<Index>(w_), kw = static_cast<Index>(kw_);
    std::size_t col = 0;
    for (std::size_t b = 0; b < batch; ++b) {
      const std::size_t image = b * h_ * w_ * c_;
      for (std::size_t oh = 0; oh < oh_; ++oh) {
        const Index ih0 = static_cast<Index>(oh * opts_.strides[0]) - static_cast<Index>(pad_top_);
        for (std::size_t ow = 0; ow < ow_; ++ow) {
          const Index iw0 = static_cast<Index>(ow * opts_.strides[1]) - static_cast<Index>(pad_left_);
          const Index first = std::max<Index>(0, -iw0);
          const Index last = std::clamp<Index>(w - iw0, first, kw);
          for (std::size_t i = 0; i < kh_; ++i, col += kw_ * c_) {
            const Index ih = ih0 + static_cast<Index>(i);
            if (ih < 0 || ih >= h) {
              visit(col, std::size_t{0}, std::size_t{0}, std::size_t{0});
              continue;
            }
            const auto pixel = static_cast<std::size_t>(ih * w + iw0 + first);
            visit(col, image + pixel * c_, static_cast<std::size_t>(first), static_cast<std::size_t>(last));
          }
        }
      }
    }
  }

  //! col_[(b, oh, ow), (i, j, c)] = x[b, oh*sh + i - pad_top, ow*sw + j - pad_left, c] (0 in the padding).
  void im2col(const Tensor<float>& x) {
    const std::size_t batch = x.shape()[0], run = kw_ * c_;
    col_.resize(batch * oh_ * ow_ * patch());
    const float* in = x.data();
    float* col = col_.data();
    for_each_run(batch, [&](std::size_t at, std::size_t from, std::size_t first, std::size_t last) {
      float* row = col + at;
      std::fill(row, row + first * c_, 0.f);
      std::copy(in + from, in + from + (last - first) * c_, row + first * c_);
      std::fill(row + last * c_, row + run, 0.f);
    });
    col_src_ = x.data();
    col_batch_ = batch;
    col_valid_ = true;
  }

  //! The adjoint of im2col: adds each column entry back onto its input pixel
  //! (overlapping windows accumulate; padding entries are dropped).
  void col2im(Tensor<float>& dx) const {
    float* out = dx.data();
    const float* col = col_.data();
    for_each_run(dx.shape()[0], [&](std::size_t at, std::size_t to, std::size_t first, std::size_t last) {
      const float* row = col + at + first * c_;
      float* dst = out + to;
      const std::size_t len = (last - first) * c_;
      for (std::size_t e = 0; e < len; ++e) dst[e] += row[e];
    });
  }

  std::size_t filters_, kh_, kw_;
  Conv2DOptions opts_;
  bool built_ = false;
  Shape in_, out_;
  std::size_t h_ = 0, w_ = 0, c_ = 0, oh_ = 0, ow_ = 0, pad_top_ = 0, pad_left_ = 0;
  ParamRef kernel_{}, bias_{};
  // Per-replica scratch, reused between calls: [batch * OH * OW, kh * kw * C].
  std::vector<float> col_;
  const float* col_src_ = nullptr;
  std::size_t col_batch_ = 0;
  bool col_valid_ = false;
};

}  // namespace strata::nn
