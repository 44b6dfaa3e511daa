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
#include <strata/nn/layers/layer.hpp>
#include <strata/nn/layers/padding.hpp>
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

  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo& /*info*/) override {
    require_bound("forward");
    detail::check_input(describe(), in_, x);
    const std::size_t batch = x.shape()[0];
    detail::resize(c, y, batch, out_);
    if (batch == 0) return;
    im2col(c, x);
    const std::size_t m = batch * oh_ * ow_, k = patch(), n = filters_;
    c.gemm(false, false, m, n, k, 1.f, col_.data(), k, kernel_.value.data(), n, 0.f, y.data(), n);
    c.bias_activate(kernels::Activation::Linear, y.data(), bias_.value.data(), y.data(), m, n);
  }

  void backward(Compute& c, const Act& x, const Act& /*y*/, const Act& dy, Act* dx) override {
    require_bound("backward");
    detail::check_input(describe(), in_, x);
    const std::size_t batch = x.shape()[0];
    if (dy.shape().rank() != 4 || dy.shape()[0] != batch || detail::sample_shape(dy.shape()) != out_)
      throw ShapeError(describe() + "::backward: expected dy [" + std::to_string(batch) + ", " +
                       out_.str().substr(1) + " (the output of the forward pass) but got " + dy.shape().str());
    if (batch && (!col_valid_ || col_src_ != x.data() || col_batch_ != batch)) im2col(c, x);
    const std::size_t m = batch * oh_ * ow_, k = patch(), n = filters_;
    c.gemm(true, false, k, n, m, 1.f, col_.data(), k, dy.data(), n, 0.f, kernel_.grad.data(), n);
    c.column_sums(dy.data(), bias_.grad.data(), m, n);
    if (dx == nullptr) return;
    detail::resize(c, *dx, batch, in_);
    if (batch == 0) return;
    col_valid_ = false;
    c.gemm(false, true, m, k, n, 1.f, dy.data(), n, kernel_.value.data(), n, 0.f, col_.data(), k);
    c.col2im(window(batch), col_.data(), dx->data());
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
  [[nodiscard]] kernels::Window2D window(std::size_t batch) const {
    return {batch, h_, w_, c_, kh_, kw_, opts_.strides[0], opts_.strides[1], pad_top_, pad_left_, oh_, ow_};
  }

  void im2col(Compute& c, const Act& x) {
    const std::size_t batch = x.shape()[0];
    col_.resize(c, Shape{batch * oh_ * ow_, patch()});
    c.im2col(window(batch), x.data(), col_.data());
    col_src_ = x.data();
    col_batch_ = batch;
    col_valid_ = true;
  }

  std::size_t filters_, kh_, kw_;
  Conv2DOptions opts_;
  bool built_ = false;
  Shape in_, out_;
  std::size_t h_ = 0, w_ = 0, c_ = 0, oh_ = 0, ow_ = 0, pad_top_ = 0, pad_left_ = 0;
  ParamRef kernel_{}, bias_{};
  // Per-replica scratch, reused between calls: [batch * OH * OW, kh * kw * C].
  kernels::Scratch<float> col_;  // the last im2col (kept for backward)
  const float* col_src_ = nullptr;
  std::size_t col_batch_ = 0;
  bool col_valid_ = false;
};

}  // namespace strata::nn
