#pragma once
//! MultiHeadAttention: multi-head self-attention over a sequence, as Keras'
//! MultiHeadAttention called with query = value = key (and GPT's attention
//! block). The input is [batch, T, W]; with H heads of dh = W / H:
//!   qkv = x · qkv_kernel + qkv_bias                       [T, 3W]
//!   per head h: A_h = softmax(Q_h K_h^T / sqrt(dh) + mask) [T, T], O_h = A_h V_h
//!   y = [O_1 ... O_H] · output_kernel + output_bias       [T, W]
//! With `causal`, position t attends to positions <= t only (masked weights
//! are exactly 0). The qkv columns are head-major: head h owns the 3 dh
//! columns from 3 dh h (query, key, value), and the output kernel's rows
//! dh h.. (docs/tensor-parallelism.md). Kernels glorot-uniform as Keras'
//! (fan_in W, fan_out W per projection), biases zero.
//!   strata::nn::MultiHeadAttention attn{{.heads = 4, .causal = true}};

#include <cmath>
#include <string>

#include <strata/core/error.hpp>
#include <strata/nn/layers/activation.hpp>
#include <strata/nn/layers/layer.hpp>

namespace strata::nn {

struct AttentionOptions {
  std::size_t heads = 1;  //!< W must be divisible by it
  bool causal = false;    //!< Keras' use_causal_mask: position t sees positions <= t only
};

class MultiHeadAttention final : public detail::LayerBase<MultiHeadAttention> {
 public:
  explicit MultiHeadAttention(AttentionOptions opts = {}) : opts_(opts) {
    if (opts.heads == 0) throw Error("MultiHeadAttention: needs at least one head (heads = 0)");
  }

  [[nodiscard]] std::string kind() const override { return "MultiHeadAttention"; }
  [[nodiscard]] std::size_t heads() const noexcept { return opts_.heads; }
  [[nodiscard]] bool causal() const noexcept { return opts_.causal; }

  Shape build(const Shape& input) override {
    if (input.rank() != 2 || input[0] == 0 || input[1] == 0)
      throw ShapeError("MultiHeadAttention: expects per-sample [T, W] (a sequence of T vectors of width W), got "
                       "per-sample shape " + input.str());
    if (input[1] % opts_.heads != 0)
      throw ShapeError("MultiHeadAttention: the width " + std::to_string(input[1]) + " is not divisible by the " +
                       std::to_string(opts_.heads) + " heads; choose heads dividing the width");
    t_ = input[0];
    w_ = input[1];
    dh_ = w_ / opts_.heads;
    h_ = opts_.heads;
    inner_ = w_;
    return input;
  }
  [[nodiscard]] std::vector<ParamSpec> params() const override {
    return {{"qkv_kernel", Shape{w_, 3 * inner_}, Init::GlorotUniform, w_, w_, 0.f},
            {"qkv_bias", Shape{3 * inner_}, Init::Zeros, 0, 0, 0.f},
            {"output_kernel", Shape{inner_, w_}, Init::GlorotUniform, w_, w_, 0.f},
            {"output_bias", Shape{w_}, Init::Zeros, 0, 0, 0.f}};
  }
  void bind(std::span<const ParamRef> p) override {
    qkv_kernel_ = p[0];
    qkv_bias_ = p[1];
    out_kernel_ = p[2];
    out_bias_ = p[3];
  }

  //! Tensor parallelism: Heads keeps heads [t H/T, (t + 1) H/T): their
  //! columns of the qkv kernel and bias, their rows of the output kernel;
  //! the output bias whole (added once, after the group's sum).
  [[nodiscard]] bool can_split(TensorRole role, int size) const override {
    if (role == TensorRole::Heads) return size > 0 && h_ % static_cast<std::size_t>(size) == 0;
    return role == TensorRole::Replicated;
  }
  std::vector<TensorSegment> split(TensorRole role, int rank, int size) override {
    if (role != TensorRole::Heads || !can_split(role, size)) return Layer::split(role, rank, size);
    const auto T = static_cast<std::size_t>(size), t = static_cast<std::size_t>(rank);
    const std::size_t wl = w_ / T;  // this member's heads' width
    std::vector<TensorSegment> segs;
    for (std::size_t i = 0; i < w_; ++i) segs.push_back({i * 3 * w_ + t * 3 * wl, 3 * wl, false});
    const std::size_t qkv_bias = w_ * 3 * w_, out_kernel = qkv_bias + 3 * w_, out_bias = out_kernel + w_ * w_;
    segs.push_back({qkv_bias + t * 3 * wl, 3 * wl, false});
    segs.push_back({out_kernel + t * wl * w_, wl * w_, false});
    segs.push_back({out_bias, w_, true});
    role_ = role;
    h_ = opts_.heads / T;
    inner_ = wl;
    return segs;
  }

  using Layer::backward;
  using Layer::forward;

  void forward(Compute& c, const Act& x, Act& y, const RunInfo& info) override {
    detail::check_input(kind(), Shape{t_, w_}, x);
    group_ = detail::split_group(role_, info, kind());
    const std::size_t b = x.shape()[0], rows = b * t_, h = h_, tt = t_ * t_, wi = inner_;
    detail::resize(c, y, b, Shape{t_, w_});
    qkv_.resize(c, Shape{rows, 3 * wi});
    probs_.resize(c, Shape{b * h * tt});
    ctx_.resize(c, Shape{rows, wi});
    if (b == 0) return;
    c.dense_forward(Activation::Linear, x.data(), qkv_kernel_.value.data(), qkv_bias_.value.data(), qkv_.data(), rows,
                    w_, 3 * wi);
    const float alpha = 1.f / std::sqrt(static_cast<float>(dh_));
    for (std::size_t k = 0; k < h; ++k)  // scores: Q_k K_k^T / sqrt(dh), for every example at once
      c.gemm_strided_batched(false, true, t_, t_, dh_, alpha, q(k), 3 * wi, t_ * 3 * wi, key(k), 3 * wi, t_ * 3 * wi,
                             0.f, probs_.data() + k * tt, t_, h * tt, b);
    c.attention_softmax(probs_.data(), probs_.data(), b * h * t_, t_, opts_.causal);
    for (std::size_t k = 0; k < h; ++k)  // O_k = A_k V_k into head k's columns of the context
      c.gemm_strided_batched(false, false, t_, dh_, t_, 1.f, probs_.data() + k * tt, t_, h * tt, value(k), 3 * wi,
                             t_ * 3 * wi, 0.f, ctx_.data() + k * dh_, wi, t_ * wi, b);
    if (!group_) {
      c.dense_forward(Activation::Linear, ctx_.data(), out_kernel_.value.data(), out_bias_.value.data(), y.data(),
                      rows, wi, w_);
      return;
    }
    // split: this member's heads' part of the output projection, summed over the group, then the bias
    c.gemm(false, false, rows, w_, wi, 1.f, ctx_.data(), wi, out_kernel_.value.data(), w_, 0.f, y.data(), w_);
    group_->all_reduce_sum(c, y.data(), rows * w_);
    c.bias_activate(Activation::Linear, y.data(), out_bias_.value.data(), y.data(), rows, w_);
  }

  void backward(Compute& c, const Act& x, const Act&, const Act& dy, Act* dx) override {
    const std::size_t b = x.shape()[0], rows = b * t_, h = h_, tt = t_ * t_, wi = inner_;
    if (qkv_.size() != rows * 3 * wi || probs_.size() != b * h * tt)
      throw Error("MultiHeadAttention::backward: no forward pass of this batch to take the attention weights from; "
                  "call forward(x, y) on this layer (or clone) first");
    // the output projection: dW_o = ctx^T dy, db_o = column sums, dctx = dy W_o^T
    c.gemm(true, false, wi, w_, rows, 1.f, ctx_.data(), wi, dy.data(), w_, 0.f, out_kernel_.grad.data(), w_);
    c.column_sums(dy.data(), out_bias_.grad.data(), rows, w_);
    dctx_.resize(c, Shape{rows, wi});
    dqkv_.resize(c, Shape{rows, 3 * wi});
    dscores_.resize(c, Shape{b * h * tt});
    if (b) {
      c.gemm(false, true, rows, wi, w_, 1.f, dy.data(), w_, out_kernel_.value.data(), w_, 0.f, dctx_.data(), wi);
      const float alpha = 1.f / std::sqrt(static_cast<float>(dh_));
      for (std::size_t k = 0; k < h; ++k) {
        const float* a = probs_.data() + k * tt;
        float* ds = dscores_.data() + k * tt;
        const float* dctx = dctx_.data() + k * dh_;
        // dA_k = dO_k V_k^T; dV_k = A_k^T dO_k
        c.gemm_strided_batched(false, true, t_, t_, dh_, 1.f, dctx, wi, t_ * wi, value(k), 3 * wi, t_ * 3 * wi, 0.f,
                               ds, t_, h * tt, b);
        c.gemm_strided_batched(true, false, t_, dh_, t_, 1.f, a, t_, h * tt, dctx, wi, t_ * wi, 0.f,
                               dqkv_.data() + k * 3 * dh_ + 2 * dh_, 3 * wi, t_ * 3 * wi, b);
      }
      // through the softmax (masked weights are 0: their scores get 0), in place
      c.activation_backward(Activation::Softmax, probs_.data(), dscores_.data(), dscores_.data(), b * h * t_, t_);
      for (std::size_t k = 0; k < h; ++k) {
        const float* ds = dscores_.data() + k * tt;
        // dQ_k = dS_k K_k / sqrt(dh); dK_k = dS_k^T Q_k / sqrt(dh)
        c.gemm_strided_batched(false, false, t_, dh_, t_, alpha, ds, t_, h * tt, key(k), 3 * wi, t_ * 3 * wi, 0.f,
                               dqkv_.data() + k * 3 * dh_, 3 * wi, t_ * 3 * wi, b);
        c.gemm_strided_batched(true, false, t_, dh_, t_, alpha, ds, t_, h * tt, q(k), 3 * wi, t_ * 3 * wi, 0.f,
                               dqkv_.data() + k * 3 * dh_ + dh_, 3 * wi, t_ * 3 * wi, b);
      }
    }
    // the qkv projection (zeros for an empty batch: gemm with k = 0 clears)
    c.gemm(true, false, w_, 3 * wi, rows, 1.f, x.data(), w_, dqkv_.data(), 3 * wi, 0.f, qkv_kernel_.grad.data(),
           3 * wi);
    c.column_sums(dqkv_.data(), qkv_bias_.grad.data(), rows, 3 * wi);
    if (dx) {
      detail::resize(c, *dx, b, Shape{t_, w_});
      if (b) {
        c.gemm(false, true, rows, w_, 3 * wi, 1.f, dqkv_.data(), 3 * wi, qkv_kernel_.value.data(), 3 * wi, 0.f,
               dx->data(), w_);
        // split: each member's heads' part of the input's gradient, summed over the group
        if (group_) group_->all_reduce_sum(c, dx->data(), rows * w_);
      }
    }
  }

 private:
  // head k's query, key and value columns of the kept qkv
  [[nodiscard]] const float* q(std::size_t k) const { return qkv_.data() + k * 3 * dh_; }
  [[nodiscard]] const float* key(std::size_t k) const { return qkv_.data() + k * 3 * dh_ + dh_; }
  [[nodiscard]] const float* value(std::size_t k) const { return qkv_.data() + k * 3 * dh_ + 2 * dh_; }

  AttentionOptions opts_;
  std::size_t t_ = 0, w_ = 0, dh_ = 0;
  std::size_t h_ = 0, inner_ = 0;  // the heads this clone runs and their width (all, W; split: 1/T of each)
  TensorRole role_ = TensorRole::Replicated;
  TensorGroup* group_ = nullptr;  // split: the group it sums with, from its last forward
  ParamRef qkv_kernel_, qkv_bias_, out_kernel_, out_bias_;
  kernels::Scratch<float> qkv_;      // [b T, 3W] of the last forward
  kernels::Scratch<float> probs_;    // [b, H, T, T] attention weights of the last forward
  kernels::Scratch<float> ctx_;      // [b T, W] the heads' outputs, concatenated
  kernels::Scratch<float> dctx_;     // backward scratch: dL/dctx
  kernels::Scratch<float> dqkv_;     // dL/dqkv
  kernels::Scratch<float> dscores_;  // dL/dA, then dL/dscores in place
};

}  // namespace strata::nn
