#pragma once
//! CudaCompute: kernels::Compute on one GPU. Matrix products go through
//! cuBLAS, every other op through strata's own kernels, all enqueued on the
//! compute's non-blocking stream (calls return before their work ends,
//! except download and synchronize). This header is plain C++ (g++; it
//! includes only <cuda_runtime_api.h> and <cublas_v2.h>); the kernels
//! (cuda/kernels/*.cuh) are compiled once per program by nvcc through
//! cuda/strata_cuda.cu (or Meson's strata_cuda_dep): docs/building.md, "CUDA".
//! CUDA graphs: begin_capture(), then any calls but upload, download and
//! synchronize, then end_capture() gives a cuda::Graph that replays them.
//! Which ops are bitwise the host's: docs/gpu-coverage.md, "CudaCompute's
//! results against the host's".
//!   strata::cuda::CudaCompute gpu{0};
//!   gpu.gemm(false, false, m, n, k, 1.f, a, k, b, n, 0.f, y, n);  gpu.synchronize();

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include <strata/cuda/device.hpp>
#include <strata/cuda/device_ops.hpp>
#include <strata/cuda/error.hpp>
#include <strata/cuda/graph.hpp>
#include <strata/cuda/launch.hpp>
#include <strata/cuda/make_compute.hpp>
#include <strata/cuda/staging.hpp>
#include <strata/cuda/stream.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::cuda {

namespace detail {
struct CublasDestroy {
  void operator()(cublasHandle_t h) const noexcept { (void)cublasDestroy(h); }
};
struct CudaFree {
  void operator()(void* p) const noexcept { cuda::detail::ignore(cudaFree(p)); }
};
//! Lets the device's default memory pool keep freed memory instead of
//! returning it to the driver at each synchronization (a training step
//! frees and reallocates the same sizes every step).
inline void keep_pool_memory(int device) {
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
}
inline int as_int(std::size_t v, const char* what) {
  if (v > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw ShapeError(std::string("CudaCompute::gemm: ") + what + " = " + std::to_string(v) +
                     " exceeds cuBLAS's 32-bit sizes; split the product");
  return static_cast<int>(v);
}
}  // namespace detail

//! kernels::Compute on GPU `device`: a non-blocking stream, a cuBLAS handle
//! bound to it (with its own workspace, so captures need no allocation),
//! memory from the device's stream-ordered pool, pinned staging buffers for
//! upload and download. One per replica thread; not thread-safe.
//!   strata::cuda::CudaCompute gpu{0, strata::cuda::MathMode::TF32};
//!   float* y = static_cast<float*>(gpu.allocate(bytes));  gpu.fill(y, 0.f, n);
class CudaCompute final : public CudaDeviceOps {
 public:
  //! cuBLAS's recommended workspace for Hopper (4 MiB suffice before it).
  static constexpr std::size_t cublas_workspace_bytes = std::size_t{32} << 20;

  explicit CudaCompute(int device = 0, MathMode math = MathMode::FP32) : CudaDeviceOps(device) {
    DeviceGuard g{device_};
    detail::keep_pool_memory(device_);
    cublasHandle_t h = nullptr;
    check(cublasCreate(&h), "cublasCreate");
    blas_.reset(h);
    check(cublasSetStream(h, stream_.get()), "cublasSetStream");
    void* ws = nullptr;
    check_allocation(cudaMalloc(&ws, cublas_workspace_bytes), "cudaMalloc (cuBLAS workspace)", cublas_workspace_bytes,
                     device_);
    workspace_.reset(ws);
    check(cublasSetWorkspace(h, ws, cublas_workspace_bytes), "cublasSetWorkspace");
    set_math_mode(math);
  }
  ~CudaCompute() override {
    if (!drain()) {  // work still runs that may use the workspace: leave both allocated
      (void)blas_.release();
      (void)workspace_.release();
    }
    // the handle and its workspace belong to device_: released with it current (a replica's
    // compute may be destroyed from a thread where another GPU is); the stream goes after them
    int previous = device_;
    if (const cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) {
      detail::ignore(e);
      previous = device_;
    }
    if (previous != device_) detail::ignore(cudaSetDevice(device_));
    blas_.reset();
    workspace_.reset();
    if (previous != device_) cuda::detail::ignore(cudaSetDevice(previous));
  }

  [[nodiscard]] MathMode math_mode() const noexcept { return math_; }
  //! Changes the number format of later matrix products.
  void set_math_mode(MathMode m) {
    DeviceGuard g{device_};
    check(cublasSetMathMode(blas_.get(), m == MathMode::TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
          "cublasSetMathMode");
    math_ = m;
  }

  // -- products --------------------------------------------------------------
  //! Row-major C = alpha op(A) op(B) + beta C as the column-major product
  //! C^T = op(B)^T op(A)^T, which is what cuBLAS computes.
  void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) override {
    if (m == 0 || n == 0) return;
    DeviceGuard g{device_};
    if (k == 0) {
      detail::launch_scale_matrix(stream_.get(), c, beta, m, n, ldc);
      return;
    }
    const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int im = detail::as_int(m, "m"), in = detail::as_int(n, "n"), ik = detail::as_int(k, "k");
    const int ia = detail::as_int(lda, "lda"), ib = detail::as_int(ldb, "ldb"), ic = detail::as_int(ldc, "ldc");
    if (math_ == MathMode::BF16)
      check(cublasGemmEx(blas_.get(), tb, ta, in, im, ik, &alpha, b, CUDA_R_32F, ib, a, CUDA_R_32F, ia, &beta, c,
                         CUDA_R_32F, ic, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx(CUBLAS_COMPUTE_32F_FAST_16BF)");
    else
      check(cublasSgemm(blas_.get(), tb, ta, in, im, ik, &alpha, b, ib, a, ia, &beta, c, ic), "cublasSgemm");
  }

  //! The per-head products of attention in one cuBLAS call (cublasSgemmStridedBatched,
  //! or its Ex form in BF16), each product as gemm computes it.
  void gemm_strided_batched(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                            const float* a, std::size_t lda, std::size_t stride_a, const float* b, std::size_t ldb,
                            std::size_t stride_b, float beta, float* c, std::size_t ldc, std::size_t stride_c,
                            std::size_t batch) override {
    if (m == 0 || n == 0 || batch == 0) return;
    if (k == 0) {
      for (std::size_t i = 0; i < batch; ++i) gemm(trans_a, trans_b, m, n, 0, alpha, a, lda, b, ldb, beta,
                                                   c + i * stride_c, ldc);
      return;
    }
    DeviceGuard g{device_};
    const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int im = detail::as_int(m, "m"), in = detail::as_int(n, "n"), ik = detail::as_int(k, "k");
    const int ia = detail::as_int(lda, "lda"), ib = detail::as_int(ldb, "ldb"), ic = detail::as_int(ldc, "ldc");
    const int count = detail::as_int(batch, "batch");
    const auto sa = static_cast<long long>(stride_a), sb = static_cast<long long>(stride_b),
               sc = static_cast<long long>(stride_c);
    if (math_ == MathMode::BF16)
      check(cublasGemmStridedBatchedEx(blas_.get(), tb, ta, in, im, ik, &alpha, b, CUDA_R_32F, ib, sb, a, CUDA_R_32F,
                                       ia, sa, &beta, c, CUDA_R_32F, ic, sc, count, CUBLAS_COMPUTE_32F_FAST_16BF,
                                       CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx(CUBLAS_COMPUTE_32F_FAST_16BF)");
    else
      check(cublasSgemmStridedBatched(blas_.get(), tb, ta, in, im, ik, &alpha, b, ib, sb, a, ia, sa, &beta, c, ic, sc,
                                      count),
            "cublasSgemmStridedBatched");
  }

  // -- maps and reductions ---------------------------------------------------
  void bias_activate(kernels::Activation a, const float* x, const float* bias, float* y, std::size_t rows,
                     std::size_t cols) override {
    DeviceGuard g{device_};
    detail::launch_bias_activate(stream_.get(), a, x, bias, y, rows, cols);
  }
  using kernels::Compute::activation_backward;
  void activation_backward(kernels::Activation a, const float* z, const float* y, const float* dy, float* dz,
                           std::size_t rows, std::size_t cols) override {
    DeviceGuard g{device_};
    detail::launch_activation_backward(stream_.get(), a, z, y, dy, dz, rows, cols);
  }
  void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* xhat, float* rstd,
                  std::size_t rows, std::size_t cols, float epsilon) override {
    DeviceGuard g{device_};
    detail::launch_layer_norm(stream_.get(), x, gamma, beta, y, xhat, rstd, rows, cols, epsilon);
  }
  void layer_norm_backward(const float* dy, const float* xhat, const float* rstd, const float* gamma, float* dx,
                           float* dgamma_rows, std::size_t rows, std::size_t cols) override {
    DeviceGuard g{device_};
    detail::launch_layer_norm_backward(stream_.get(), dy, xhat, rstd, gamma, dx, dgamma_rows, rows, cols);
  }
  void attention_softmax(const float* x, float* y, std::size_t rows, std::size_t cols, bool causal) override {
    DeviceGuard g{device_};
    detail::launch_attention_softmax(stream_.get(), x, y, rows, cols, causal);
  }
  void embedding(const float* table, const float* ids, float* y, std::size_t examples, std::size_t steps,
                 std::size_t vocab, std::size_t width) override {
    DeviceGuard g{device_};
    detail::launch_embedding(stream_.get(), table, ids, y, examples * steps, vocab, width);
  }
  void embedding_backward(const float* ids, const float* dy, float* dtable, std::size_t n, std::size_t vocab,
                          std::size_t width) override {
    DeviceGuard g{device_};
    detail::launch_embedding_backward(stream_.get(), ids, dy, dtable, n, vocab, width);
  }
  void column_sums(const float* x, float* out, std::size_t rows, std::size_t cols) override {
    DeviceGuard g{device_};
    detail::launch_column_sums(stream_.get(), x, out, rows, cols);
  }
  void axpy(float a, const float* x, float* y, std::size_t n) override {
    DeviceGuard g{device_};
    detail::launch_axpy(stream_.get(), a, x, y, n);
  }
  void dropout(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key, float rate) override {
    DeviceGuard g{device_};
    detail::launch_dropout(stream_.get(), x, y, mask, n, key, rate);
  }
  void multiply(const float* x, const float* mask, float* y, std::size_t n) override {
    DeviceGuard g{device_};
    detail::launch_multiply(stream_.get(), x, mask, y, n);
  }
  void round_to_wire(WireFormat f, const float* g, const float* res, float* next, void* out,
                     std::size_t n) override {
    DeviceGuard guard{device_};
    detail::launch_round_to_wire(stream_.get(), f, g, res, next, out, n);
  }
  void expand_wire(WireFormat f, const void* w, float* g, std::size_t n) override {
    DeviceGuard guard{device_};
    detail::launch_expand_wire(stream_.get(), f, w, g, n);
  }
  void count_nonfinite(const float* x, std::size_t n, double* acc) override {
    DeviceGuard g{device_};
    detail::launch_count_nonfinite(stream_.get(), x, n, acc);
  }

  // -- losses and metrics ----------------------------------------------------
  void sparse_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                           std::size_t classes, bool from_logits, double* acc, double* invalid) override {
    DeviceGuard g{device_};
    detail::launch_sparse_crossentropy(stream_.get(), pred, labels, d, scale, rows, classes, from_logits, acc,
                                       invalid);
  }
  void categorical_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                                std::size_t classes, bool from_logits, double* acc) override {
    DeviceGuard g{device_};
    detail::launch_categorical_crossentropy(stream_.get(), pred, labels, d, scale, rows, classes, from_logits, acc);
  }
  void sequence_crossentropy(const float* pred, const float* labels, float* d, float scale,
                             const kernels::SequenceLabels& s, bool from_logits, double* acc, double* invalid) override {
    DeviceGuard g{device_};
    detail::launch_sequence_crossentropy(stream_.get(), pred, labels, d, scale, s, from_logits, acc, invalid);
  }
  void sequence_hits(const float* pred, const float* labels, const kernels::SequenceLabels& s, double* acc,
                     double* invalid) override {
    DeviceGuard g{device_};
    detail::launch_sequence_hits(stream_.get(), pred, labels, s, acc, invalid);
  }
  void mean_squared_error(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                          std::size_t width, double* acc) override {
    DeviceGuard g{device_};
    detail::launch_mean_squared_error(stream_.get(), pred, labels, d, scale, rows, width, acc);
  }
  void sparse_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes, double* acc,
                   double* invalid) override {
    DeviceGuard g{device_};
    detail::launch_sparse_hits(stream_.get(), pred, labels, rows, classes, acc, invalid);
  }
  void categorical_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes,
                        double* acc) override {
    DeviceGuard g{device_};
    detail::launch_categorical_hits(stream_.get(), pred, labels, rows, classes, acc);
  }
  void binary_hits(const float* pred, const float* labels, std::size_t n, double* acc) override {
    DeviceGuard g{device_};
    detail::launch_binary_hits(stream_.get(), pred, labels, n, acc);
  }
  void add_square_sum(const float* x, std::size_t n, float k, double* acc) override {
    DeviceGuard g{device_};
    detail::launch_add_square_sum(stream_.get(), x, n, k, acc);
  }

  // -- images ----------------------------------------------------------------
  void im2col(const kernels::Window2D& w, const float* x, float* col) override {
    DeviceGuard g{device_};
    detail::launch_im2col(stream_.get(), w, x, col);
  }
  void col2im(const kernels::Window2D& w, const float* col, float* dx) override {
    DeviceGuard g{device_};
    detail::launch_col2im(stream_.get(), w, col, dx);
  }
  void max_pool(const kernels::Window2D& w, const float* x, float* y, std::uint32_t* argmax) override {
    DeviceGuard g{device_};
    detail::launch_max_pool(stream_.get(), w, x, y, argmax);
  }
  void max_pool_backward(const kernels::Window2D& w, const float* dy, const std::uint32_t* argmax,
                         float* dx) override {
    DeviceGuard g{device_};
    detail::launch_max_pool_backward(stream_.get(), w, dy, argmax, dx);
  }

  // -- optimizer updates -----------------------------------------------------
  void sgd(float* w, const float* grad, float* v, std::size_t n, const kernels::SgdStep& s) override {
    DeviceGuard g{device_};
    detail::launch_sgd(stream_.get(), w, grad, v, n, s);
  }
  void adam(float* w, const float* grad, float* m, float* v, std::size_t n, const kernels::AdamStep& s) override {
    DeviceGuard g{device_};
    detail::launch_adam(stream_.get(), w, grad, m, v, n, s);
  }
  void adamw(float* w, const float* grad, float* m, float* v, std::size_t n, const kernels::AdamWStep& s) override {
    DeviceGuard g{device_};
    detail::launch_adamw(stream_.get(), w, grad, m, v, n, s);
  }
  void square_sum(const float* x, std::size_t n, double* out) override {
    DeviceGuard g{device_};
    detail::launch_square_sum(stream_.get(), x, n, out);
  }
  void clip_by_norm(float* x, std::size_t n, float clipnorm, const double* sumsq) override {
    DeviceGuard g{device_};
    detail::launch_clip_by_norm(stream_.get(), x, n, clipnorm, sumsq);
  }
  // -- a capturable step (kernels/step_state.hpp) ------------------------------
  void sgd_at(float* w, const float* g, float* v, std::size_t n, const kernels::SgdStep& s,
              const kernels::DeviceStep& d) override {
    DeviceGuard guard{device_};
    detail::launch_sgd_at(stream_.get(), w, g, v, n, s, d);
  }
  void adam_at(float* w, const float* g, float* m, float* v, std::size_t n, const kernels::AdamStep& s,
               const kernels::DeviceStep& d) override {
    DeviceGuard guard{device_};
    detail::launch_adam_at(stream_.get(), w, g, m, v, n, s, d);
  }
  void adamw_at(float* w, const float* g, float* m, float* v, std::size_t n, const kernels::AdamWStep& s,
                const kernels::DeviceStep& d) override {
    DeviceGuard guard{device_};
    detail::launch_adamw_at(stream_.get(), w, g, m, v, n, s, d);
  }
  void dropout_at(const float* x, float* y, float* mask, std::size_t n, std::uint64_t key_base, std::uint64_t layer,
                  std::uint64_t salt, const kernels::StepCounters* c, float rate) override {
    DeviceGuard guard{device_};
    detail::launch_dropout_at(stream_.get(), x, y, mask, n, key_base, layer, salt, c, rate);
  }
  void end_step(kernels::StepCounters* c, bool gated) override {
    DeviceGuard guard{device_};
    detail::launch_end_step(stream_.get(), c, gated);
  }
  [[nodiscard]] bool captures_steps() const noexcept override { return true; }
  void begin_step_capture() override { begin_capture(); }
  [[nodiscard]] std::unique_ptr<kernels::StepGraph> end_step_capture() override {
    return std::make_unique<GraphStep>(end_capture());
  }

 private:
  MathMode math_ = MathMode::FP32;
  std::unique_ptr<void, detail::CudaFree> workspace_;  // declared before blas_: freed after the handle
  std::unique_ptr<cublasContext, detail::CublasDestroy> blas_;
};

}  // namespace strata::cuda
