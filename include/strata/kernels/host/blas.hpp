#pragma once
//! Host matrix products: row-major single-precision GEMM through a
//! CBLAS (OpenBLAS). OpenBLAS is told to stay on one thread: each replica
//! already has a core, and a BLAS thread pool per call would fight them.
//!   strata::kernels::host::gemm(false, true, m, n, k, 1.f, a, k, b, k, 0.f, c, n);  // C = A * B^T

#include <strata/core/build_config.hpp>  // <strata/config.hpp>, or defaults in a build by hand

#if !STRATA_HAS_CBLAS
#error "strata/nn and strata/kernels/host need a CBLAS: install libopenblas-dev and reconfigure (meson setup --reconfigure)"
#endif

#include <cblas.h>

#include <cstddef>
#include <mutex>

extern "C" void openblas_set_num_threads(int);

namespace strata::kernels::host {

inline void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

//! C[m x n] = alpha * op(A) * op(B) + beta * C, row-major, with
//! op(A) m x k and op(B) k x n. Deterministic for fixed sizes (one thread).
inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                 std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace strata::kernels::host
