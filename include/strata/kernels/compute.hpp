#pragma once
//! The compute vocabulary: every operation a layer, loss, metric or
//! optimizer needs, with one implementation per memory space. Layers are
//! written once against this interface; the replica's Compute (HostCompute:
//! CBLAS and vectorizable loops; CudaCompute: cuBLAS and kernels on the
//! replica's stream, <strata/cuda.hpp>) decides where and how they run.
//! Pointers passed in are in the Compute's space (device pointers for a
//! CudaCompute); calls are ordered as issued (on a GPU: stream-ordered, so
//! a call returns before its work ends, except download and synchronize).
//!   strata::kernels::HostCompute& c = strata::kernels::host_compute();
//!   c.gemm(false, false, m, n, k, 1.f, a, k, b, n, 0.f, y, n);  c.bias_activate(Activation::ReLU, y, bias, m, n);
//! Deterministic on the host (fixed order); on a GPU the matrix products
//! and the row/column sums are deterministic for fixed shapes, the loss and
//! metric accumulators (atomic adds) are not bitwise across runs.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <strata/core/error.hpp>
#include <strata/core/half.hpp>
#include <strata/kernels/bodies/activations.hpp>
#include <strata/kernels/memory.hpp>
#include <strata/kernels/step_state.hpp>

namespace strata::kernels {

//! The number format of matrix products on a GPU: FP32 (default), TF32
//! tensor cores (10-bit mantissa inputs, FP32 accumulation), or BF16 inputs
//! with FP32 accumulation. Values, every other op and optimizer state stay
//! FP32; host products are always FP32.
//!   strata::OneDeviceStrategy s{strata::gpu(0)};  s.executor_options().matmul = strata::MatmulPrecision::TF32;
enum class MatmulPrecision { FP32, TF32, BF16 };

//! A 2-D window over NHWC images (convolution patches or pooling windows):
//! `batch` images of h x w x c, windows kh x kw at strides sh, sw with
//! pad_top / pad_left zero (or skipped) rows and columns before the image,
//! giving oh x ow windows per image.
struct Window2D {
  std::size_t batch = 0, h = 0, w = 0, c = 0;
  std::size_t kh = 0, kw = 0, sh = 1, sw = 1, pad_top = 0, pad_left = 0, oh = 0, ow = 0;
};

//! The labels of a per-position (sequence) loss: `batch` examples of `steps`
//! positions, each position a row of `classes` predictions and one label.
//! When `masked`, a label equal to ignore_class leaves its position out.
struct SequenceLabels {
  std::size_t batch = 0, steps = 0, classes = 0;
  bool masked = false;
  float ignore_class = -1.f;
};

//! The optimizer updates the vocabulary knows.
struct SgdStep {
  float lr = 0.f, momentum = 0.f;
  bool nesterov = false;
};
struct AdamStep {
  float lr_t = 0.f;  //!< the step size with Adam's bias correction folded in
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-7f;
};
//! AdamW's (nn/optimizers/adam_w.hpp): w *= decay, then Adam's update.
struct AdamWStep {
  AdamStep adam;
  float decay = 1.f;                  //!< 1 - lr * weight_decay: this step's decoupled decay (1: Adam's bits)
  const RateTable* decays = nullptr;  //!< adamw_at: the decay of each iteration, in the compute's memory
};

//! The operations on a space's memory (Memory: allocation, copies, fill,
//! synchronize, bind_thread, count_nonfinite) and every operation below on it.
class Compute : public Memory {
 public:
  // -- products ------------------------------------------------------------
  //! Row-major C[m x n] = alpha * op(A) * op(B) + beta * C with op(A) m x k,
  //! op(B) k x n (k = 0: C = beta * C).
  virtual void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                    std::size_t ldc) = 0;

  //! `batch` products of gemm's form, the i-th reading a + i * stride_a and
  //! b + i * stride_b and writing c + i * stride_c (cuBLAS' strided-batched
  //! gemm; attention's per-head products). By default one gemm per product, in order.
  virtual void gemm_strided_batched(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                                    float alpha, const float* a, std::size_t lda, std::size_t stride_a, const float* b,
                                    std::size_t ldb, std::size_t stride_b, float beta, float* c, std::size_t ldc,
                                    std::size_t stride_c, std::size_t batch) {
    for (std::size_t i = 0; i < batch; ++i)
      gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
  }

  //! A dense layer's forward: y[rows x out] = act(x[rows x in] * w[in x out]
  //! + bias) (bias may be null). By default a product, then bias_activate; a
  //! space may fuse them differently.
  virtual void dense_forward(Activation a, const float* x, const float* w, const float* bias, float* y,
                             std::size_t rows, std::size_t in, std::size_t out) {
    gemm(false, false, rows, out, in, 1.f, x, in, w, out, 0.f, y, out);
    bias_activate(a, y, bias, y, rows, out);
  }

  // -- maps and reductions -------------------------------------------------
  //! y[r, :] = act(x[r, :] + bias) over rows x cols (bias may be null; y may be x).
  virtual void bias_activate(Activation a, const float* x, const float* bias, float* y, std::size_t rows,
                             std::size_t cols) = 0;
  //! dz = dL/dz of y = act(z) from z, y and dy (dz may be dy); softmax over
  //! rows of `cols`. z may be null unless activation_needs_input(a) (GELU).
  virtual void activation_backward(Activation a, const float* z, const float* y, const float* dy, float* dz,
                                   std::size_t rows, std::size_t cols) = 0;
  //! The same for an activation whose gradient needs only its output y.
  void activation_backward(Activation a, const float* y, const float* dy, float* dz, std::size_t rows,
                           std::size_t cols) {
    activation_backward(a, nullptr, y, dy, dz, rows, cols);
  }
  //! Layer normalization over rows of `cols`: xhat = (x - mean) * rstd with
  //! the row's mean and rstd = 1 / sqrt(variance + epsilon), y = xhat *
  //! (1 + gamma) + beta (gamma, beta: `cols` each; gamma is the scale's
  //! offset from 1, so zeros are the identity). xhat [rows x cols] and rstd
  //! [rows] are kept for the backward pass. Bitwise equal in every space.
  virtual void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* xhat, float* rstd,
                          std::size_t rows, std::size_t cols, float epsilon) = 0;
  //! Its gradient: dx (may be null) from dy, xhat, rstd and gamma; dgamma_rows = dy * xhat
  //! (column_sums of it give dL/dgamma; those of dy give dL/dbeta).
  virtual void layer_norm_backward(const float* dy, const float* xhat, const float* rstd, const float* gamma,
                                   float* dx, float* dgamma_rows, std::size_t rows, std::size_t cols) = 0;
  //! Attention weights: a stable softmax over each row of `cols` scores (y
  //! may be x). When `causal`, the rows are stacked cols x cols score
  //! matrices and row r (the query at position r % cols) sees only the keys
  //! j <= r % cols; the others get weight 0 (so activation_backward's softmax
  //! gives them gradient 0). Host and GPU agree to the rounding of exp.
  virtual void attention_softmax(const float* x, float* y, std::size_t rows, std::size_t cols, bool causal) = 0;
  //! Embedding lookup: y[i, :] = table[ids[i], :] for the examples x steps
  //! ids (floats naming rows of the vocab x width table). An id that is not
  //! an integer in [0, vocab): the host throws an Error naming its example
  //! and position; a GPU writes a row of NaN (the loss is then NaN, which
  //! fit's non-finite check reports).
  virtual void embedding(const float* table, const float* ids, float* y, std::size_t examples, std::size_t steps,
                         std::size_t vocab, std::size_t width) = 0;
  //! Its gradient: dtable[v, :] = the sum of dy[i, :] over the n positions
  //! whose id is v, added in position order (overwritten; the same bits in
  //! every space and run: no atomics). Ids that name no row add nothing.
  virtual void embedding_backward(const float* ids, const float* dy, float* dtable, std::size_t n, std::size_t vocab,
                                  std::size_t width) = 0;
  //! out[j] = sum over r of x[r, j] (overwritten; zeros for no rows).
  virtual void column_sums(const float* x, float* out, std::size_t rows, std::size_t cols) = 0;
  //! y += a * x.
  virtual void axpy(float a, const float* x, float* y, std::size_t n) = 0;
  //! y = x * mask where mask_i = (draw_i < rate ? 0 : 1 / (1 - rate)), draw_i
  //! the i-th uniform of strata::Rng{key} (bitwise the same masks in every
  //! space); the mask is kept in `mask` for the backward pass.
  virtual void dropout(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key, float rate) = 0;
  //! y = x * mask (elementwise).
  virtual void multiply(const float* x, const float* mask, float* y, std::size_t n) = 0;

  // -- gradient compression (gradient/compression.hpp) ----------------------
  //! out[i] = g[i] + res[i] rounded to `f` (bf16 or fp16 elements at `out`),
  //! next[i] = what the rounding lost (0 where the rounded value is not
  //! finite): bodies::RoundWithResidual, the same bits in every space. `next`
  //! may be `res` (the residual updated in place).
  virtual void round_to_wire(WireFormat f, const float* g, const float* res, float* next, void* out,
                             std::size_t n) = 0;
  //! g[i] = the i-th `f` element at `w` in FP32 (exact).
  virtual void expand_wire(WireFormat f, const void* w, float* g, std::size_t n) = 0;

  // -- losses and metrics --------------------------------------------------
  // Each adds its sum over the rows to *acc (a double in this space) and,
  // when `d` is not null, writes scale * d(sum)/d(pred). Labels are floats.
  // A label that is not a class index is counted into *invalid (a double in
  // this space) on a GPU; the host throws at once, naming the example.
  // Non-finite values propagate (as every op here: an activation, a pooling
  // window or a softmax row with a NaN gives NaN): a NaN prediction gives a
  // NaN loss, and a NaN prediction row adds NaN to a hit count.
  virtual void sparse_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                                   std::size_t classes, bool from_logits, double* acc, double* invalid) = 0;
  virtual void categorical_crossentropy(const float* pred, const float* labels, float* d, float scale,
                                        std::size_t rows, std::size_t classes, bool from_logits, double* acc) = 0;
  //! Per-position sparse cross-entropy: an example's loss is the mean over
  //! its unmasked positions of the position's cross-entropy (0 for an
  //! example with every position masked, which also gets no gradient); a
  //! position's gradient is scale / (its example's unmasked positions) times
  //! d(loss)/d(pred); masked positions get 0. Labels: s.batch x s.steps.
  virtual void sequence_crossentropy(const float* pred, const float* labels, float* d, float scale,
                                     const SequenceLabels& s, bool from_logits, double* acc, double* invalid) = 0;
  //! Per example: the fraction of its unmasked positions whose argmax is the
  //! label (0 for an example with every position masked).
  virtual void sequence_hits(const float* pred, const float* labels, const SequenceLabels& s, double* acc,
                             double* invalid) = 0;
  //! Per example: the mean over its `width` elements of (pred - label)^2.
  virtual void mean_squared_error(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                                  std::size_t width, double* acc) = 0;
  //! Examples whose argmax is the label index (sparse), the label's argmax
  //! (categorical), or, one value each, on the label's side of 0.5 (binary).
  virtual void sparse_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes,
                           double* acc, double* invalid) = 0;
  virtual void categorical_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes,
                                double* acc) = 0;
  virtual void binary_hits(const float* pred, const float* labels, std::size_t n, double* acc) = 0;
  //! *acc += k * sum of x_i^2 (the L2 penalty as reported in the loss).
  virtual void add_square_sum(const float* x, std::size_t n, float k, double* acc) = 0;

  // -- images --------------------------------------------------------------
  //! col[(b, oh, ow), (i, j, c)] = x at that window position (0 in the padding).
  virtual void im2col(const Window2D& g, const float* x, float* col) = 0;
  //! dx = the sum of every column entry into the position it came from (overwritten).
  virtual void col2im(const Window2D& g, const float* col, float* dx) = 0;
  //! y = the maximum of each window (NaN wins); argmax = the input offset
  //! within its image that gave it.
  virtual void max_pool(const Window2D& g, const float* x, float* y, std::uint32_t* argmax) = 0;
  //! dx = dy routed to the arguments of the maxima (overwritten).
  virtual void max_pool_backward(const Window2D& g, const float* dy, const std::uint32_t* argmax, float* dx) = 0;

  // -- optimizer updates (elementwise: any slice of the parameters) ---------
  //! Keras' SGD: v = momentum * v - lr * g, w += v (or Nesterov's form); no
  //! momentum: w -= lr * g and `v` is unused.
  virtual void sgd(float* w, const float* g, float* v, std::size_t n, const SgdStep& s) = 0;
  //! Adam in one pass: m, v updated, w -= lr_t * m / (sqrt(v) + epsilon).
  virtual void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) = 0;
  //! AdamW in one pass: w *= s.decay, then adam's update with s.adam (s.decay = 1: adam's bits).
  virtual void adamw(float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& s) = 0;
  //! Clipping by the global norm (the executors, execution/sync_executor.hpp):
  //! *out = the sum of x_i^2 in double, in bodies::square_sum_lanes' fixed
  //! order (the same bits in every space and run; overwritten, 0 for n = 0).
  virtual void square_sum(const float* x, std::size_t n, double* out) = 0;
  //! x *= bodies::clip_factor(*sumsq, clipnorm), *sumsq in this space (read
  //! when the op runs: a captured step's replay reads the new sum); x is
  //! left as it is when that norm is not above clipnorm or not finite.
  virtual void clip_by_norm(float* x, std::size_t n, float clipnorm, const double* sumsq) = 0;

  // -- a capturable step (kernels/step_state.hpp) ----------------------------
  // What varies from step to step is read in this space, where a replayed
  // capture finds it: each op gives the bits of its by-value form above.
  //! sgd with s.lr replaced by rate_at(*d.rates, d.counters->iteration); no
  //! change when the gate is closed (update_runs(d) false).
  virtual void sgd_at(float* w, const float* g, float* v, std::size_t n, const SgdStep& s, const DeviceStep& d) = 0;
  //! adam with s.lr_t replaced by rate_at(*d.rates, d.counters->iteration), gated as sgd_at.
  virtual void adam_at(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s,
                       const DeviceStep& d) = 0;
  //! adamw with s.adam.lr_t from d.rates and s.decay from *s.decays at the iteration, gated as sgd_at.
  virtual void adamw_at(float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& s,
                        const DeviceStep& d) = 0;
  //! dropout with key mix(key_base, c->iteration, layer, salt) (Dropout's
  //! key is mix(seed, replica, iteration, layer, salt) = that, key_base = mix(seed, replica)).
  virtual void dropout_at(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key_base,
                          std::uint64_t layer, std::uint64_t salt, const StepCounters* c, float rate) = 0;
  //! end_step_body(*c, gated): the iteration advanced, or the skip counted.
  virtual void end_step(StepCounters* c, bool gated) = 0;

  //! Whether this space captures a step's calls itself (a GPU: a CUDA
  //! graph); the host's is captured by a RecordingCompute around it
  //! (kernels/recording_compute.hpp).
  [[nodiscard]] virtual bool captures_steps() const noexcept { return false; }
  //! From here to end_step_capture() calls are captured, not run; upload,
  //! download, synchronize and allocation are refused meanwhile.
  virtual void begin_step_capture() { throw Error(name() + " cannot capture a step"); }
  //! The captured calls, replayed by launch().
  [[nodiscard]] virtual std::unique_ptr<StepGraph> end_step_capture() {
    throw Error(name() + " cannot capture a step");
  }
};

}  // namespace strata::kernels
