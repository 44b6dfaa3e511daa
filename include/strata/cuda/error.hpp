#pragma once
//! Typed CUDA errors and the one place every CUDA runtime and cuBLAS status
//! of strata is checked: a failing call throws CudaError naming the call,
//! the status and the device; an allocation that does not fit throws
//! CudaOutOfMemory naming the bytes requested.
//!   STRATA_CUDA_CHECK(cudaStreamSynchronize(s));          // throws strata::CudaError on failure
//!   strata::cuda::check(cublasCreate(&h), "cublasCreate");

#include <strata/core/build_config.hpp>  // <strata/config.hpp>, or defaults in a build by hand

#if !STRATA_HAS_CUDA
#error "strata/cuda needs the CUDA backend: install the CUDA toolkit (nvcc, cuBLAS) and configure with -Dcuda=enabled"
#endif

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include <strata/core/error.hpp>

namespace strata {

//! A CUDA runtime or cuBLAS call failed: `call()` is the call as written,
//! `status()` the library's name and description of its status.
//!   try { c.synchronize(); } catch (const strata::CudaError& e) { std::cerr << e.call() << ": " << e.status(); }
//!   // e.what(): "CUDA call cudaStreamSynchronize(stream_) failed on device 0: cudaErrorIllegalAddress (...)"
class CudaError : public Error {
 public:
  CudaError(std::string call, std::string status, const std::string& what)
      : Error(what), call_(std::move(call)), status_(std::move(status)) {}
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  [[nodiscard]] const std::string& status() const noexcept { return status_; }

 private:
  std::string call_, status_;
};

//! A device allocation of `bytes()` on device `device()` did not fit in its
//! memory (device() is -1 for pinned host memory).
//!   try { void* p = c.allocate(std::size_t{1} << 50); } catch (const strata::CudaOutOfMemory& e) { e.bytes(); }
//!   // e.what() names the bytes, the device and the call
class CudaOutOfMemory : public CudaError {
 public:
  CudaOutOfMemory(std::string call, std::string status, const std::string& what, std::size_t bytes, int device)
      : CudaError(std::move(call), std::move(status), what), bytes_(bytes), device_(device) {}
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  std::size_t bytes_;
  int device_;
};

namespace cuda {

namespace detail {
//! The current device, for messages (-1 when even that fails).
inline int current_device_or_minus_one() noexcept {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
}
inline std::string status_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}
inline std::string status_text(cublasStatus_t s) {
  return std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ")";
}
//! A call returned `e`: clears the thread's last error if it is that call's
//! own (`e`), and leaves it otherwise, so that the failing call is the one
//! the next check names (a sticky error stays whatever this does).
//!   const cudaError_t q = cudaEventQuery(e);  if (q == cudaErrorNotReady) consume_error(q);
inline void consume_error(cudaError_t e) noexcept {
  if (e != cudaSuccess && cudaPeekAtLastError() == e) (void)cudaGetLastError();
}
//! A status a path cannot report (a destructor, a deallocation, the cleanup
//! on a failure path): its own error is consumed, so that the next check
//! names the call that failed, not this one.
//!   ignore(cudaFreeAsync(p, s));
inline void ignore(cudaError_t e) noexcept { consume_error(e); }
}  // namespace detail

//! Throws CudaError naming `call` unless `e` is cudaSuccess. The call's own
//! non-sticky error is cleared first, so that the next check does not
//! report it again (another call's is left for its own check).
//!   strata::cuda::check(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
//!   STRATA_CUDA_CHECK(cudaGetLastError());   // the same, naming the call by its text
inline void check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  detail::consume_error(e);
  const int dev = detail::current_device_or_minus_one();
  throw CudaError(call, detail::status_text(e),
                  std::string("CUDA call ") + call + " failed on device " + std::to_string(dev) + ": " +
                      detail::status_text(e));
}

//! Throws CudaError naming `call` unless `s` is CUBLAS_STATUS_SUCCESS.
//!   strata::cuda::check(cublasSgemm(h, ...), "cublasSgemm");
//!   STRATA_CUDA_CHECK(cublasSetStream(h, s));
inline void check(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const int dev = detail::current_device_or_minus_one();
  throw CudaError(call, detail::status_text(s),
                  std::string("cuBLAS call ") + call + " failed on device " + std::to_string(dev) + ": " +
                      detail::status_text(s));
}

//! For an allocation's status: CudaOutOfMemory when the memory is short,
//! CudaError for any other failure.
//!   strata::cuda::check_allocation(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync", bytes, device);
//!   // throws CudaOutOfMemory("... 1125899906842624 bytes on device 0 ...")
inline void check_allocation(cudaError_t e, const char* call, std::size_t bytes, int device) {
  if (e == cudaSuccess) return;
  if (e != cudaErrorMemoryAllocation) check(e, call);
  detail::consume_error(e);
  std::size_t free = 0, total = 0;
  std::string have;
  if (const cudaError_t info = cudaMemGetInfo(&free, &total); info == cudaSuccess)
    have = " (" + std::to_string(free) + " of " + std::to_string(total) + " bytes free)";
  else
    detail::consume_error(info);
  throw CudaOutOfMemory(call, detail::status_text(e),
                        std::string("CUDA call ") + call + ": out of memory allocating " + std::to_string(bytes) +
                            (device < 0 ? std::string(" bytes of pinned host memory")
                                        : " bytes on device " + std::to_string(device) + have) +
                            "; use smaller batches or free tensors first",
                        bytes, device);
}

}  // namespace cuda
}  // namespace strata

//! Checks a CUDA runtime or cuBLAS call, naming it by its source text.
//!   STRATA_CUDA_CHECK(cudaEventRecord(e, s));
//!   STRATA_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
#define STRATA_CUDA_CHECK(call) ::strata::cuda::check((call), #call)
