#pragma once
//! RecordingCompute: stream capture for a space that has none (the host's),
//! with a CUDA graph's rules. Around another Compute, it forwards every
//! call until begin_step_capture(); from there to end_step_capture() each
//! call is recorded with the values and pointers it was given, not run, and
//! the returned StepGraph runs the recording again at each launch(). So a
//! step that takes a varying scalar by value replays a stale one, exactly
//! as a CUDA graph would, and a step that uploads, downloads, synchronizes
//! or allocates inside the capture is refused as a CUDA capture refuses it:
//! the host-as-GPU tests run captured steps with the GPU's constraints.
//!   strata::kernels::RecordingCompute rec{strata::kernels::host_compute()};
//!   rec.begin_step_capture();  step(rec);  auto graph = rec.end_step_capture();
//!   for (int i = 0; i < steps; ++i) graph->launch();   // the same calls, the values in memory new

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::kernels {

class RecordingCompute final : public Compute {
 public:
  explicit RecordingCompute(Compute& inner) : in_(inner) {}

  [[nodiscard]] Compute& inner() noexcept { return in_; }
  [[nodiscard]] bool capturing() const noexcept { return capturing_; }

  // -- memory: refused inside a capture, as CUDA refuses it ------------------
  [[nodiscard]] Where where() const noexcept override { return in_.where(); }
  [[nodiscard]] std::string name() const override { return in_.name(); }
  [[nodiscard]] void* allocate(std::size_t bytes) override {
    refuse("allocate " + std::to_string(bytes) + " bytes");
    return in_.allocate(bytes);
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    if (capturing_ && p) freed_in_capture_ = true;  // noexcept: reported at end_step_capture
    in_.deallocate(p, bytes);
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    refuse("upload");
    in_.upload(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    refuse("download");
    in_.download(dst, src, bytes);
  }
  void synchronize() override {
    refuse("synchronize");
    in_.synchronize();
  }
  int bind_thread() override { return in_.bind_thread(); }
  void unbind_thread(int previous) noexcept override { in_.unbind_thread(previous); }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    run([=, this] { in_.copy(dst, src, bytes); });
  }
  void fill(float* x, float value, std::size_t n) override {
    run([=, this] { in_.fill(x, value, n); });
  }
  void count_nonfinite(const float* x, std::size_t n, double* acc) override {
    run([=, this] { in_.count_nonfinite(x, n, acc); });
  }

  // -- the vocabulary: run now, or recorded --------------------------------
  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) override {
    run([=, this] { in_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
  }
  void gemm_strided_batched(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                            const float* a, std::size_t lda, std::size_t sa, const float* b, std::size_t ldb,
                            std::size_t sb, float beta, float* c, std::size_t ldc, std::size_t sc,
                            std::size_t batch) override {
    run([=, this] { in_.gemm_strided_batched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch); });
  }
  void dense_forward(Activation a, const float* x, const float* w, const float* bias, float* y, std::size_t rows,
                     std::size_t in, std::size_t out) override {
    run([=, this] { in_.dense_forward(a, x, w, bias, y, rows, in, out); });
  }
  void bias_activate(Activation a, const float* x, const float* bias, float* y, std::size_t rows,
                     std::size_t cols) override {
    run([=, this] { in_.bias_activate(a, x, bias, y, rows, cols); });
  }
  using Compute::activation_backward;
  void activation_backward(Activation a, const float* z, const float* y, const float* dy, float* dz,
                           std::size_t rows, std::size_t cols) override {
    run([=, this] { in_.activation_backward(a, z, y, dy, dz, rows, cols); });
  }
  void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* xhat, float* rstd,
                  std::size_t rows, std::size_t cols, float epsilon) override {
    run([=, this] { in_.layer_norm(x, gamma, beta, y, xhat, rstd, rows, cols, epsilon); });
  }
  void layer_norm_backward(const float* dy, const float* xhat, const float* rstd, const float* gamma, float* dx,
                           float* dgamma_rows, std::size_t rows, std::size_t cols) override {
    run([=, this] { in_.layer_norm_backward(dy, xhat, rstd, gamma, dx, dgamma_rows, rows, cols); });
  }
  void attention_softmax(const float* x, float* y, std::size_t rows, std::size_t cols, bool causal) override {
    run([=, this] { in_.attention_softmax(x, y, rows, cols, causal); });
  }
  void embedding(const float* table, const float* ids, float* y, std::size_t examples, std::size_t steps,
                 std::size_t vocab, std::size_t width) override {
    run([=, this] { in_.embedding(table, ids, y, examples, steps, vocab, width); });
  }
  void embedding_backward(const float* ids, const float* dy, float* dtable, std::size_t n, std::size_t vocab,
                          std::size_t width) override {
    run([=, this] { in_.embedding_backward(ids, dy, dtable, n, vocab, width); });
  }
  void column_sums(const float* x, float* out, std::size_t rows, std::size_t cols) override {
    run([=, this] { in_.column_sums(x, out, rows, cols); });
  }
  void axpy(float a, const float* x, float* y, std::size_t n) override {
    run([=, this] { in_.axpy(a, x, y, n); });
  }
  void dropout(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key, float rate) override {
    run([=, this] { in_.dropout(x, y, mask, n, key, rate); });
  }
  void multiply(const float* x, const float* mask, float* y, std::size_t n) override {
    run([=, this] { in_.multiply(x, mask, y, n); });
  }
  void round_to_wire(WireFormat f, const float* g, const float* res, float* next, void* out,
                     std::size_t n) override {
    run([=, this] { in_.round_to_wire(f, g, res, next, out, n); });
  }
  void expand_wire(WireFormat f, const void* w, float* g, std::size_t n) override {
    run([=, this] { in_.expand_wire(f, w, g, n); });
  }
  void sparse_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                           std::size_t classes, bool from_logits, double* acc, double* invalid) override {
    run([=, this] { in_.sparse_crossentropy(pred, labels, d, scale, rows, classes, from_logits, acc, invalid); });
  }
  void categorical_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                                std::size_t classes, bool from_logits, double* acc) override {
    run([=, this] { in_.categorical_crossentropy(pred, labels, d, scale, rows, classes, from_logits, acc); });
  }
  void sequence_crossentropy(const float* pred, const float* labels, float* d, float scale, const SequenceLabels& s,
                             bool from_logits, double* acc, double* invalid) override {
    run([=, this] { in_.sequence_crossentropy(pred, labels, d, scale, s, from_logits, acc, invalid); });
  }
  void sequence_hits(const float* pred, const float* labels, const SequenceLabels& s, double* acc,
                     double* invalid) override {
    run([=, this] { in_.sequence_hits(pred, labels, s, acc, invalid); });
  }
  void mean_squared_error(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                          std::size_t width, double* acc) override {
    run([=, this] { in_.mean_squared_error(pred, labels, d, scale, rows, width, acc); });
  }
  void sparse_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes, double* acc,
                   double* invalid) override {
    run([=, this] { in_.sparse_hits(pred, labels, rows, classes, acc, invalid); });
  }
  void categorical_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes,
                        double* acc) override {
    run([=, this] { in_.categorical_hits(pred, labels, rows, classes, acc); });
  }
  void binary_hits(const float* pred, const float* labels, std::size_t n, double* acc) override {
    run([=, this] { in_.binary_hits(pred, labels, n, acc); });
  }
  void add_square_sum(const float* x, std::size_t n, float k, double* acc) override {
    run([=, this] { in_.add_square_sum(x, n, k, acc); });
  }
  void im2col(const Window2D& g, const float* x, float* col) override {
    run([=, this] { in_.im2col(g, x, col); });
  }
  void col2im(const Window2D& g, const float* col, float* dx) override {
    run([=, this] { in_.col2im(g, col, dx); });
  }
  void max_pool(const Window2D& g, const float* x, float* y, std::uint32_t* argmax) override {
    run([=, this] { in_.max_pool(g, x, y, argmax); });
  }
  void max_pool_backward(const Window2D& g, const float* dy, const std::uint32_t* argmax, float* dx) override {
    run([=, this] { in_.max_pool_backward(g, dy, argmax, dx); });
  }
  void sgd(float* w, const float* g, float* v, std::size_t n, const SgdStep& s) override {
    run([=, this] { in_.sgd(w, g, v, n, s); });
  }
  void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) override {
    run([=, this] { in_.adam(w, g, m, v, n, s); });
  }
  void adamw(float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& s) override {
    run([=, this] { in_.adamw(w, g, m, v, n, s); });
  }
  void square_sum(const float* x, std::size_t n, double* out) override {
    run([=, this] { in_.square_sum(x, n, out); });
  }
  void clip_by_norm(float* x, std::size_t n, float clipnorm, const double* sumsq) override {
    run([=, this] { in_.clip_by_norm(x, n, clipnorm, sumsq); });
  }
  void sgd_at(float* w, const float* g, float* v, std::size_t n, const SgdStep& s, const DeviceStep& d) override {
    run([=, this] { in_.sgd_at(w, g, v, n, s, d); });
  }
  void adam_at(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s,
               const DeviceStep& d) override {
    run([=, this] { in_.adam_at(w, g, m, v, n, s, d); });
  }
  void adamw_at(float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& s,
                const DeviceStep& d) override {
    run([=, this] { in_.adamw_at(w, g, m, v, n, s, d); });
  }
  void dropout_at(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key_base, std::uint64_t layer,
                  std::uint64_t salt, const StepCounters* c, float rate) override {
    run([=, this] { in_.dropout_at(x, y, mask, n, key_base, layer, salt, c, rate); });
  }
  void end_step(StepCounters* c, bool gated) override {
    run([=, this] { in_.end_step(c, gated); });
  }

  // -- capture ----------------------------------------------------------------
  [[nodiscard]] bool captures_steps() const noexcept override { return true; }
  void begin_step_capture() override {
    if (capturing_) throw Error(name() + ": begin_step_capture while a capture is open");
    capturing_ = true;
    freed_in_capture_ = false;
    calls_ = std::make_shared<std::vector<std::function<void()>>>();
  }
  [[nodiscard]] std::unique_ptr<StepGraph> end_step_capture() override {
    if (!capturing_) throw Error(name() + ": end_step_capture without begin_step_capture()");
    capturing_ = false;
    if (freed_in_capture_)
      throw Error(name() + ": the captured step freed memory (a CUDA graph's replay would use it after its free)");
    return std::make_unique<Recording>(std::move(calls_));
  }

 private:
  using Calls = std::shared_ptr<std::vector<std::function<void()>>>;
  class Recording final : public StepGraph {
   public:
    explicit Recording(Calls calls) : calls_(std::move(calls)) {}
    void launch() override {
      for (auto& f : *calls_) f();
    }

   private:
    Calls calls_;
  };

  template <class F>
  void run(F&& f) {
    if (capturing_) calls_->emplace_back(std::forward<F>(f));
    else f();
  }
  void refuse(const std::string& what) const {
    if (capturing_)
      throw Error(name() + ": a captured step may not " + what +
                  " (a CUDA graph cannot hold it: move it before the capture, or out of the step)");
  }

  Compute& in_;
  bool capturing_ = false;
  bool freed_in_capture_ = false;
  Calls calls_;
};

}  // namespace strata::kernels
