#pragma once
// A test's device buffer: n elements of T on one GPU, uploaded from and read
// back into a std::vector through a stream of that GPU (the NCCL tests).
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <vector>

#include <strata/cuda/error.hpp>
#include <strata/cuda/stream.hpp>

namespace gpu_test {

//! n elements of T on one GPU, written and read through a stream of it.
template <class T>
class DeviceVector {
 public:
  DeviceVector(const std::vector<T>& v, int device, cudaStream_t stream)
      : device_(device), stream_(stream), n_(v.size()) {
    strata::cuda::DeviceGuard g{device};
    if (n_ == 0) return;
    STRATA_CUDA_CHECK(cudaMalloc(&p_, n_ * sizeof(T)));
    STRATA_CUDA_CHECK(cudaMemcpyAsync(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  ~DeviceVector() {
    if (p_ == nullptr) return;
    strata::cuda::DeviceGuard g{device_};
    (void)cudaFree(p_);
  }
  std::span<T> span() const { return {p_, n_}; }
  std::vector<T> read() const {
    std::vector<T> v(n_);
    if (n_ == 0) return v;
    strata::cuda::DeviceGuard g{device_};
    STRATA_CUDA_CHECK(cudaMemcpyAsync(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return v;
  }

 private:
  int device_;
  cudaStream_t stream_;
  std::size_t n_;
  T* p_ = nullptr;
};

}  // namespace gpu_test
