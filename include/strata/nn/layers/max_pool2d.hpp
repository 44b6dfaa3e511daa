#pragma once
//! MaxPool2D: the maximum over each window of NHWC images, channel by channel,
//! with the Keras semantics (padding never wins a window: it is not a value).
//!   strata::nn::MaxPool2D pool(2);   // 2x2 windows, stride 2, valid padding
//!   strata::Shape out = pool.build({26, 26, 32});   // [13, 13, 32]

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/layers/layer.hpp>
#include <strata/nn/layers/padding.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::nn {

//! How a MaxPool2D slides its window: strides (rows, columns) and border
//! padding. Strides left at {0, 0} take the pool size, so windows tile the image.
//!   strata::nn::MaxPool2DOptions opts{.strides = {1, 1}, .padding = strata::nn::Padding::Same};
//!   strata::nn::MaxPool2D pool(3, opts);
struct MaxPool2DOptions {
  std::array<std::size_t, 2> strides{0, 0};
  Padding padding = Padding::Valid;
};

//! A max-pooling layer: input [batch, H, W, C], output [batch, OH, OW, C]; no parameters.
//! The gradient flows to the first maximum of each window (ties: the first in
//! row-major window order), so backward is deterministic.
//!   strata::nn::MaxPool2D pool({3, 2}, {.strides = {2, 2}, .padding = strata::nn::Padding::Same});
//!   pool.build({28, 28, 8});   // [14, 14, 8]
class MaxPool2D : public detail::LayerBase<MaxPool2D> {
 public:
  //! A square `pool` x `pool` window.
  //!   strata::nn::MaxPool2D pool(2);
  //!   strata::nn::MaxPool2D overlapping(3, {.strides = {2, 2}});
  explicit MaxPool2D(std::size_t pool, MaxPool2DOptions options = {})
      : MaxPool2D(std::array<std::size_t, 2>{pool, pool}, options) {}

  //! A `pool` = {rows, columns} window.
  //!   strata::nn::MaxPool2D pool({2, 1});
  //!   strata::nn::MaxPool2D same({2, 3}, {.padding = strata::nn::Padding::Same});
  explicit MaxPool2D(std::array<std::size_t, 2> pool, MaxPool2DOptions options = {})
      : ph_(pool[0]), pw_(pool[1]), padding_(options.padding) {
    const bool tile = options.strides[0] == 0 && options.strides[1] == 0;
    sh_ = tile ? ph_ : options.strides[0];
    sw_ = tile ? pw_ : options.strides[1];
  }

  [[nodiscard]] std::string kind() const override { return "MaxPool2D"; }

  Shape build(const Shape& input) override {
    const std::string what = describe();
    if (ph_ == 0 || pw_ == 0) throw ShapeError(what + ": the pool must be at least 1x1, got " + grid(ph_, pw_));
    if (sh_ == 0 || sw_ == 0)
      throw ShapeError(what + ": strides must both be positive (or both 0 for the pool size), got " +
                       grid(sh_, sw_));
    if (input.rank() != 3)
      throw ShapeError(what + ": expects a per-sample input [height, width, channels] (NHWC without the batch), got " +
                       input.str() + " of rank " + std::to_string(input.rank()));
    if (input[0] == 0 || input[1] == 0 || input[2] == 0)
      throw ShapeError(what + ": the input image " + input.str() + " has an empty extent");
    if (padding_ == Padding::Valid && (ph_ > input[0] || pw_ > input[1]))
      throw ShapeError(what + ": the pool " + grid(ph_, pw_) + " is larger than the " + grid(input[0], input[1]) +
                       " input with valid padding; use a smaller pool or Padding::Same");
    if (input.elements() > std::numeric_limits<std::uint32_t>::max())
      throw ShapeError(what + ": an input image " + input.str() + " of more than 2^32 values is not supported");
    in_ = input;
    h_ = input[0], w_ = input[1], c_ = input[2];
    const auto rows = detail::window_1d(h_, ph_, sh_, padding_);
    const auto cols = detail::window_1d(w_, pw_, sw_, padding_);
    oh_ = rows.out, ow_ = cols.out, pad_top_ = rows.pad_before, pad_left_ = cols.pad_before;
    out_ = Shape{oh_, ow_, c_};
    built_ = true;
    argmax_ = {};
    return out_;
  }

  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo& /*info*/) override {
    if (!built_) throw Error(describe() + "::forward: call build(input shape) first");
    detail::check_input(describe(), in_, x);
    const std::size_t batch = x.shape()[0];
    detail::resize(c, y, batch, out_);
    argmax_.resize(c, y.shape());
    if (batch) c.max_pool(window(batch), x.data(), y.data(), argmax_.data());
  }

  void backward(Compute& c, const Act& x, const Act& /*y*/, const Act& dy, Act* dx) override {
    if (!built_) throw Error(describe() + "::backward: call build(input shape) first");
    detail::check_input(describe(), in_, x);
    const std::size_t batch = x.shape()[0];
    if (dy.shape().rank() != 4 || dy.shape()[0] != batch || detail::sample_shape(dy.shape()) != out_)
      throw ShapeError(describe() + "::backward: expected dy [" + std::to_string(batch) + ", " +
                       out_.str().substr(1) + " (the output of the forward pass) but got " + dy.shape().str());
    if (argmax_.memory() == nullptr || argmax_.size() != dy.size())
      throw Error(describe() + "::backward: no forward pass of this batch size to take the maxima from; "
                               "call forward(x, y) on this layer (or clone) first");
    if (dx == nullptr) return;
    detail::resize(c, *dx, batch, in_);
    if (batch) c.max_pool_backward(window(batch), dy.data(), argmax_.data(), dx->data());
  }

 private:
  static std::string grid(std::size_t a, std::size_t b) { return std::to_string(a) + "x" + std::to_string(b); }

  [[nodiscard]] std::string describe() const {
    return "MaxPool2D(" + grid(ph_, pw_) + ", strides " + grid(sh_, sw_) + ", " + to_string(padding_) + ")";
  }

  //! The input indices [first, last) a window starting at `start` (in padded
  //! coordinates) covers along an axis of `extent`.
  [[nodiscard]] kernels::Window2D window(std::size_t batch) const {
    return {batch, h_, w_, c_, ph_, pw_, sh_, sw_, pad_top_, pad_left_, oh_, ow_};
  }

  std::size_t ph_, pw_, sh_ = 0, sw_ = 0;
  Padding padding_;
  bool built_ = false;
  Shape in_, out_;
  std::size_t h_ = 0, w_ = 0, c_ = 0, oh_ = 0, ow_ = 0, pad_top_ = 0, pad_left_ = 0;
  // Per replica: where each output's maximum lies within its sample. 32 bits
  // rather than a flat size_t lets the compare-and-select loop vectorize.
  kernels::Scratch<std::uint32_t> argmax_;  // per output: its maximum's offset in the image
};

}  // namespace strata::nn
