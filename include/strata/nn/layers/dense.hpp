#pragma once
//! Dense (fully connected) layer: y = act(x · kernel + bias), kernel
//! [in, units] glorot-uniform, bias zero, optional L2 on the kernel. As
//! Keras' Dense it acts on the last axis: a per-sample input [..., in]
//! gives [..., units], every leading position a row of the product (rows =
//! batch x the leading extents), with the same kernel.
//!   strata::nn::Dense{128, {.activation = strata::nn::Activation::ReLU}}   // input size inferred
//!   strata::nn::Dense{784, 128}                                            // input size stated
//!   strata::nn::Dense{64}.build({16, 32});                                  // [16, 32] -> [16, 64]
//! Tensor parallelism (split(), device/tensor_group.hpp): as Megatron's
//! pair, Column keeps 1/T of the units (its kernel's columns and its bias),
//! the input's gradient summed over the group; Row keeps 1/T of the input
//! (its kernel's rows) and sums its partial products over the group before
//! its whole bias and activation.

#include <optional>
#include <string>
#include <vector>

#include <strata/nn/layers/activation.hpp>
#include <strata/nn/layers/layer.hpp>

namespace strata::nn {

struct DenseOptions {
  Activation activation = Activation::Linear;
  bool use_bias = true;
  float l2 = 0.f;  //!< kernel regularizer: adds l2 * sum(kernel^2) to the loss
};

class Dense final : public detail::LayerBase<Dense> {
 public:
  explicit Dense(std::size_t units, DenseOptions opts = {}) : units_(units), opts_(opts) { check(); }
  Dense(std::size_t input_dim, std::size_t units, DenseOptions opts = {})
      : units_(units), input_dim_(input_dim), opts_(opts) { check(); }

  [[nodiscard]] std::string kind() const override { return "Dense"; }
  [[nodiscard]] std::size_t units() const noexcept { return units_; }

  Shape build(const Shape& input) override {
    if (input.rank() == 0)
      throw ShapeError("Dense: acts on the last axis of its input and got a scalar per sample (per-sample shape " +
                       input.str() + "); give it at least a vector");
    if (input_dim_ && *input_dim_ != input.dims().back())
      throw ShapeError("Dense: was declared with input size " + std::to_string(*input_dim_) + " but receives " +
                       input.str());
    if (input.dims().back() == 0) throw ShapeError("Dense: got an empty last axis (per-sample shape " + input.str() + ")");
    in_shape_ = input;
    in_ = input.dims().back();
    std::vector<std::size_t> out = input.dims();
    out.back() = units_;
    out_shape_ = Shape(std::move(out));
    return out_shape_;
  }
  [[nodiscard]] std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> p{{"kernel", Shape{in_, units_}, Init::GlorotUniform, in_, units_, opts_.l2}};
    if (opts_.use_bias) p.push_back({"bias", Shape{units_}, Init::Zeros, 0, 0, 0.f});
    return p;
  }
  void bind(std::span<const ParamRef> p) override {
    kernel_ = p[0];
    if (opts_.use_bias) bias_ = p[1];
  }

  [[nodiscard]] bool can_split(TensorRole role, int size) const override {
    const auto T = static_cast<std::size_t>(size);
    if (role == TensorRole::Column) return size > 0 && units_ % T == 0;
    if (role == TensorRole::Row) return size > 0 && in_ % T == 0;
    return role == TensorRole::Replicated;
  }
  std::vector<TensorSegment> split(TensorRole role, int rank, int size) override {
    if (role == TensorRole::Replicated || role == TensorRole::Heads || !can_split(role, size))
      return Layer::split(role, rank, size);
    const auto T = static_cast<std::size_t>(size), t = static_cast<std::size_t>(rank);
    const std::size_t kernel = in_ * units_;
    std::vector<TensorSegment> segs;
    role_ = role;
    if (role == TensorRole::Column) {  // columns [t u, (t + 1) u) of every row, then that part of the bias
      const std::size_t u = units_ / T;
      for (std::size_t i = 0; i < in_; ++i) segs.push_back({i * units_ + t * u, u, false});
      if (opts_.use_bias) segs.push_back({kernel + t * u, u, false});
      units_ = u;
      std::vector<std::size_t> out = out_shape_.dims();
      out.back() = u;
      out_shape_ = Shape(std::move(out));
    } else {  // rows [t i, (t + 1) i): contiguous; the bias whole
      const std::size_t i = in_ / T;
      segs.push_back({t * i * units_, i * units_, false});
      if (opts_.use_bias) segs.push_back({kernel, units_, true});
      in_ = i;
      std::vector<std::size_t> in = in_shape_.dims();
      in.back() = i;
      in_shape_ = Shape(std::move(in));
    }
    return segs;
  }

  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo& info) override {
    if (in_ == 0) throw Error("Dense: forward before build(); build the layer for its input shape first");
    detail::check_input("Dense", in_shape_, x);
    group_ = detail::split_group(role_, info, "Dense");
    const std::size_t b = x.size() / in_;  // rows: the batch times the leading extents
    detail::resize(c, y, x.shape()[0], out_shape_);
    if (b == 0) return;
    const float* bias = opts_.use_bias ? bias_.value.data() : nullptr;
    if (role_ == TensorRole::Row) {  // the partial product summed over the group, then the bias and activation
      Act* z = &y;
      if (kernels::activation_needs_input(opts_.activation)) z_.resize(c, y.shape()), z = &z_;
      c.gemm(false, false, b, units_, in_, 1.f, x.data(), in_, kernel_.value.data(), units_, 0.f, z->data(), units_);
      group_->all_reduce_sum(c, z->data(), b * units_);
      c.bias_activate(opts_.activation, z->data(), bias, y.data(), b, units_);
      return;
    }
    if (!kernels::activation_needs_input(opts_.activation)) {
      c.dense_forward(opts_.activation, x.data(), kernel_.value.data(), bias, y.data(), b, in_, units_);
      return;
    }
    // the activation's gradient needs z = x * kernel + bias: keep it
    z_.resize(c, y.shape());
    c.dense_forward(Activation::Linear, x.data(), kernel_.value.data(), bias, z_.data(), b, in_, units_);
    c.bias_activate(opts_.activation, z_.data(), nullptr, y.data(), b, units_);
  }

  void backward(Compute& c, const Act& x, const Act& y, const Act& dy, Act* dx) override {
    if (in_ == 0) throw Error("Dense: backward before build(); build the layer for its input shape first");
    const std::size_t b = x.size() / in_;
    const float* dz = dy.data();
    if (opts_.activation != Activation::Linear) {
      dz_.resize(c, dy.shape());
      const float* z = kernels::activation_needs_input(opts_.activation) ? z_.data() : nullptr;
      c.activation_backward(opts_.activation, z, y.data(), dy.data(), dz_.data(), b, units_);
      dz = dz_.data();
    }
    // dkernel = x^T dz (zero when the batch is empty: gemm with k = 0 clears)
    c.gemm(true, false, in_, units_, b, 1.f, x.data(), in_, dz, units_, 0.f, kernel_.grad.data(), units_);
    if (opts_.use_bias) c.column_sums(dz, bias_.grad.data(), b, units_);
    if (dx) {
      detail::resize(c, *dx, x.shape()[0], in_shape_);
      if (b) c.gemm(false, true, b, in_, units_, 1.f, dz, units_, kernel_.value.data(), units_, 0.f, dx->data(), in_);
      // column-parallel: each member's part of the input's gradient, summed (Megatron's f in backward)
      if (role_ == TensorRole::Column && b) group_->all_reduce_sum(c, dx->data(), dx->size());
    }
  }

 private:
  void check() const {
    if (units_ == 0) throw Error("Dense: units must be at least 1");
    if (input_dim_ && *input_dim_ == 0) throw Error("Dense: input size must be at least 1");
  }

  std::size_t units_;
  std::optional<std::size_t> input_dim_;
  DenseOptions opts_;
  std::size_t in_ = 0;
  Shape in_shape_, out_shape_;  // per sample: [..., in] and [..., units]
  ParamRef kernel_, bias_;
  kernels::Scratch<float> dz_;  // dL/d(pre-activation), in the replica's space
  kernels::Scratch<float> z_;   // the pre-activation, kept for activations whose gradient needs it
  TensorRole role_ = TensorRole::Replicated;  // tensor parallelism: this clone's part (split())
  TensorGroup* group_ = nullptr;              // and the group it sums with, from its last forward
};

}  // namespace strata::nn
