#pragma once
//! HostCompute: the compute vocabulary (kernels/compute.hpp) on the host:
//! CBLAS matrix products, vectorizable loops, memory from HostSpace. One
//! instance serves every CPU replica (it keeps no state).
//!   strata::kernels::Compute& c = strata::kernels::host_compute();
//!   strata::kernels::Buffer<float> y{c, strata::Shape{4, 10}};
//! Deterministic: fixed order, one BLAS thread.

#include <cstring>
#include <string>

#include <strata/core/random.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/kernels/host/attention.hpp>
#include <strata/kernels/host/blas.hpp>
#include <strata/kernels/host/images.hpp>
#include <strata/kernels/host/layer_norm.hpp>
#include <strata/kernels/host/losses.hpp>
#include <strata/kernels/host/maps.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/kernels/host/optim.hpp>
#include <strata/kernels/host/sequence_losses.hpp>
#include <strata/tensor/space.hpp>

namespace strata::kernels {

class HostCompute : public HostMemoryOps<Compute> {
 public:
  HostCompute() { host::blas_single_threaded(); }

  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) override {
    host::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  //! The bias is copied into every row and the product added to it (beta =
  //! 1): the order of operations strata's pinned CPU results were made with.
  void dense_forward(Activation a, const float* x, const float* w, const float* bias, float* y, std::size_t rows,
                     std::size_t in, std::size_t out) override {
    if (rows == 0) return;
    if (bias)
      for (std::size_t i = 0; i < rows; ++i) std::copy_n(bias, out, y + i * out);
    host::gemm(false, false, rows, out, in, 1.f, x, in, w, out, bias ? 1.f : 0.f, y, out);
    host::bias_activate(a, y, nullptr, y, rows, out);
  }

  void bias_activate(Activation a, const float* x, const float* bias, float* y, std::size_t rows,
                     std::size_t cols) override {
    host::bias_activate(a, x, bias, y, rows, cols);
  }
  using Compute::activation_backward;
  void activation_backward(Activation a, const float* z, const float* y, const float* dy, float* dz,
                           std::size_t rows, std::size_t cols) override {
    host::activation_backward(a, z, y, dy, dz, rows, cols);
  }
  void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* xhat, float* rstd,
                  std::size_t rows, std::size_t cols, float epsilon) override {
    host::layer_norm(x, gamma, beta, y, xhat, rstd, rows, cols, epsilon);
  }
  void layer_norm_backward(const float* dy, const float* xhat, const float* rstd, const float* gamma, float* dx,
                           float* dgamma_rows, std::size_t rows, std::size_t cols) override {
    host::layer_norm_backward(dy, xhat, rstd, gamma, dx, dgamma_rows, rows, cols);
  }
  void attention_softmax(const float* x, float* y, std::size_t rows, std::size_t cols, bool causal) override {
    host::attention_softmax(x, y, rows, cols, causal);
  }
  void embedding(const float* table, const float* ids, float* y, std::size_t examples, std::size_t steps,
                 std::size_t vocab, std::size_t width) override {
    host::embedding(table, ids, y, examples, steps, vocab, width);
  }
  void embedding_backward(const float* ids, const float* dy, float* dtable, std::size_t n, std::size_t vocab,
                          std::size_t width) override {
    host::embedding_backward(ids, dy, dtable, n, vocab, width);
  }
  void column_sums(const float* x, float* out, std::size_t rows, std::size_t cols) override {
    host::column_sums(x, out, rows, cols);
  }
  void axpy(float a, const float* x, float* y, std::size_t n) override { host::axpy(a, x, y, n); }
  void dropout(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key, float rate) override {
    host::dropout(x, y, mask, n, key, rate);
  }
  void multiply(const float* x, const float* mask, float* y, std::size_t n) override { host::multiply(x, mask, y, n); }
  void round_to_wire(WireFormat f, const float* g, const float* res, float* next, void* out,
                     std::size_t n) override {
    host::round_to_wire(f, g, res, next, out, n);
  }
  void expand_wire(WireFormat f, const void* w, float* g, std::size_t n) override { host::expand_wire(f, w, g, n); }

  void sparse_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                           std::size_t classes, bool from_logits, double* acc, double* /*invalid*/) override {
    host::sparse_crossentropy(pred, labels, d, scale, rows, classes, from_logits, acc);
  }
  void categorical_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                                std::size_t classes, bool from_logits, double* acc) override {
    host::categorical_crossentropy(pred, labels, d, scale, rows, classes, from_logits, acc);
  }
  void sequence_crossentropy(const float* pred, const float* labels, float* d, float scale, const SequenceLabels& s,
                             bool from_logits, double* acc, double* /*invalid*/) override {
    host::sequence_crossentropy(pred, labels, d, scale, s, from_logits, acc);
  }
  void sequence_hits(const float* pred, const float* labels, const SequenceLabels& s, double* acc,
                     double* /*invalid*/) override {
    host::sequence_hits(pred, labels, s, acc);
  }
  void mean_squared_error(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                          std::size_t width, double* acc) override {
    host::mean_squared_error(pred, labels, d, scale, rows, width, acc);
  }
  void sparse_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes, double* acc,
                   double* /*invalid*/) override {
    host::sparse_hits(pred, labels, rows, classes, acc);
  }
  void categorical_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes,
                        double* acc) override {
    host::categorical_hits(pred, labels, rows, classes, acc);
  }
  void binary_hits(const float* pred, const float* labels, std::size_t n, double* acc) override {
    host::binary_hits(pred, labels, n, acc);
  }
  void add_square_sum(const float* x, std::size_t n, float k, double* acc) override {
    host::add_square_sum(x, n, k, acc);
  }

  void im2col(const Window2D& g, const float* x, float* col) override { host::im2col(g, x, col); }
  void col2im(const Window2D& g, const float* col, float* dx) override { host::col2im(g, col, dx); }
  void max_pool(const Window2D& g, const float* x, float* y, std::uint32_t* argmax) override {
    host::max_pool(g, x, y, argmax);
  }
  void max_pool_backward(const Window2D& g, const float* dy, const std::uint32_t* argmax, float* dx) override {
    host::max_pool_backward(g, dy, argmax, dx);
  }

  void sgd(float* w, const float* g, float* v, std::size_t n, const SgdStep& s) override { host::sgd(w, g, v, n, s); }
  void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) override {
    host::adam(w, g, m, v, n, s);
  }
  void adamw(float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& s) override {
    host::adamw(w, g, m, v, n, s);
  }
  void square_sum(const float* x, std::size_t n, double* out) override { *out = host::square_sum(x, n); }
  void clip_by_norm(float* x, std::size_t n, float clipnorm, const double* sumsq) override {
    host::scale(x, n, bodies::clip_factor(*sumsq, clipnorm));
  }

  void sgd_at(float* w, const float* g, float* v, std::size_t n, const SgdStep& s, const DeviceStep& d) override {
    if (!update_runs(d)) return;
    SgdStep at = s;
    at.lr = rate_at(*d.rates, d.counters->iteration);
    sgd(w, g, v, n, at);  // the virtual step: a device stand-in runs its body
  }
  void adam_at(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s,
               const DeviceStep& d) override {
    if (!update_runs(d)) return;
    AdamStep at = s;
    at.lr_t = rate_at(*d.rates, d.counters->iteration);
    adam(w, g, m, v, n, at);
  }
  void adamw_at(float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& s,
                const DeviceStep& d) override {
    if (!update_runs(d)) return;
    AdamWStep at = s;
    at.adam.lr_t = rate_at(*d.rates, d.counters->iteration);
    at.decay = rate_at(*s.decays, d.counters->iteration);
    adamw(w, g, m, v, n, at);
  }
  void dropout_at(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key_base, std::uint64_t layer,
                  std::uint64_t salt, const StepCounters* c, float rate) override {
    host::dropout(x, y, mask, n, strata::detail::mix(key_base, c->iteration, layer, salt), rate);
  }
  void end_step(StepCounters* c, bool gated) override { end_step_body(*c, gated); }
};

//! The process's host compute (stateless, shared by every CPU replica).
inline HostCompute& host_compute() {
  static HostCompute c;
  return c;
}

}  // namespace strata::kernels
