#pragma once
// A test's device buffer: n elements of T on one GPU, uploaded from and read
// back into a std::vector through a stream of that GPU (the NCCL and device
// communicator tests), optionally `pad` elements past an aligned address.
// From the stream-ordered pool (cudaMallocAsync), as the replicas' buffers
// of CudaCompute are: a communicator that reads another GPU's buffers must
// have been given access to its pool, which cudaMalloc memory would hide.
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <vector>

#include <strata/cuda/error.hpp>
#include <strata/cuda/stream.hpp>

namespace gpu_test {

//! n elements of T on one GPU, written and read through a stream of it.
//! `pad` elements past the pool's (256-byte aligned) address: pad = 1
//! makes every access unaligned. Never a null pointer, even for n = 0.
template <class T>
class DeviceVector {
 public:
  DeviceVector(const std::vector<T>& v, int device, cudaStream_t stream, std::size_t pad = 0)
      : device_(device), stream_(stream), n_(v.size()) {
    strata::cuda::DeviceGuard g{device};
    STRATA_CUDA_CHECK(cudaMallocAsync(&base_, (n_ + pad) * sizeof(T) + 16, stream));
    p_ = static_cast<T*>(base_) + pad;
    if (n_) STRATA_CUDA_CHECK(cudaMemcpyAsync(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));  // `v` may be a temporary
  }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  ~DeviceVector() {
    strata::cuda::DeviceGuard g{device_};
    (void)cudaFreeAsync(base_, stream_);
    (void)cudaStreamSynchronize(stream_);
  }
  T* get() const { return p_; }
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
  void* base_ = nullptr;
  T* p_ = nullptr;
};

}  // namespace gpu_test
