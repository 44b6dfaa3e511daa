#pragma once
//! Which GPUs there are. Asking never fails for "no GPU": a machine without
//! a device or a driver has device_count() == 0, so programs and tests can
//! choose their path (GPU tests skip, saying so).
//!   if (!strata::cuda::has_gpu()) return 77;   // Meson's "skipped"
//!   std::cout << strata::cuda::device_name(0);  // "NVIDIA H100 80GB HBM3"

#include <string>

#include <strata/cuda/error.hpp>

namespace strata::cuda {

//! The number of usable CUDA devices; 0 without a device or a driver (never throws).
//!   int n = strata::cuda::device_count();
//!   for (int d = 0; d < n; ++d) std::cout << strata::cuda::device_name(d) << '\n';
inline int device_count() noexcept {
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    detail::consume_error(e);  // cudaErrorNoDevice, cudaErrorInsufficientDriver, ...: no GPU to use
    return 0;
  }
  return n;
}

//! Whether at least one CUDA device can be used.
//!   if (strata::cuda::has_gpu()) run_on_gpu();
//!   else std::cout << "skipped: no GPU\n";
inline bool has_gpu() noexcept { return device_count() > 0; }

//! The marketing name of device `device`; CudaError for a device that does not exist.
//!   std::string n = strata::cuda::device_name(0);
//!   // "NVIDIA H100 80GB HBM3"
inline std::string device_name(int device) {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  return p.name;
}

//! CudaError (naming the count) unless 0 <= device < device_count().
//!   strata::cuda::require_device(d, "make_compute");
//!   // "make_compute: there is no CUDA device 3 (this machine has 1)"
inline void require_device(int device, const char* who) {
  const int n = device_count();
  if (device < 0 || device >= n)
    throw CudaError(who, "cudaErrorInvalidDevice",
                    std::string(who) + ": there is no CUDA device " + std::to_string(device) + " (this machine has " +
                        std::to_string(n) + (n == 1 ? ")" : "; valid devices are 0 to " + std::to_string(n - 1) + ")"));
}

}  // namespace strata::cuda
