#pragma once
//! CudaSpace: tensors in GPU memory, Tensor<T, CudaSpace>. Memory comes
//! from the current device's stream-ordered pool (cudaMallocAsync; freed
//! blocks stay cached in the pool), never managed memory. Such a tensor's
//! elements are not addressable from the host: indexing, iterating, fill,
//! == and allclose do not compile for it; its elements travel through
//! to_device / to_host (pinned staging buffers).
//!   strata::Tensor<float, strata::CudaSpace> d = strata::to_device(host);   // on the current device
//!   strata::Tensor<float> back = strata::to_host(d);
//! Every operation here is synchronous with the host (it has finished when
//! it returns). Work on another stream that uses a tensor's memory (a
//! CudaCompute's) must be finished before the tensor is destroyed.

#include <cstddef>
#include <cstdint>
#include <mutex>

#include <strata/cuda/error.hpp>
#include <strata/cuda/staging.hpp>
#include <strata/cuda/stream.hpp>
#include <strata/tensor/space.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace detail {
//! Per device: the stream CudaSpace's operations are ordered on and its
//! staging buffers. Made on first use, never destroyed (tensors freed during
//! static destruction still find it).
struct CudaSpaceContext {
  explicit CudaSpaceContext(int device) : stream(device) {
    cudaMemPool_t pool = nullptr;  // keep freed memory cached in the pool (see CudaCompute)
    cuda::check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
    std::uint64_t threshold = ~std::uint64_t{0};
    cuda::check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
  }
  std::mutex mu;  // guards the staging buffers
  cuda::Stream stream;
  cuda::detail::Stager stager;

  static CudaSpaceContext& of(int device) {
    constexpr int max_devices = 64;
    static std::mutex made;
    static CudaSpaceContext* contexts[max_devices] = {};
    cuda::require_device(device, "CudaSpace");
    if (device >= max_devices) throw CudaError("CudaSpace", "", "CudaSpace: device index above 63");
    std::lock_guard lk(made);
    if (!contexts[device]) contexts[device] = new CudaSpaceContext(device);
    return *contexts[device];
  }
  static int current_device() {
    int d = 0;
    cuda::check(cudaGetDevice(&d), "cudaGetDevice");
    return d;
  }
  //! The device that owns device memory `p`.
  static int device_of(const void* p) {
    cudaPointerAttributes a{};
    cuda::check(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes");
    if (a.type != cudaMemoryTypeDevice)
      throw Error("CudaSpace: a pointer that is not device memory reached a device tensor operation");
    return a.device;
  }
};
}  // namespace detail

//! GPU memory of the current device, as a MemorySpace (tensor/space.hpp).
//! Not host accessible; provides the copy and zero hooks Tensor uses.
//!   strata::cuda::DeviceGuard g{0};
//!   strata::Tensor<float, strata::CudaSpace> t{strata::Shape{128, 784}};   // zeros on GPU 0
struct CudaSpace {
  using memory_space = CudaSpace;
  static constexpr const char* name = "cuda";
  static constexpr bool host_accessible = false;

  //! `bytes` on the current device (null for 0); CudaOutOfMemory when they do not fit.
  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const int device = detail::CudaSpaceContext::current_device();
    auto& ctx = detail::CudaSpaceContext::of(device);
    void* p = nullptr;
    cuda::check_allocation(cudaMallocAsync(&p, bytes, ctx.stream.get()), "cudaMallocAsync (CudaSpace::allocate)",
                           bytes, device);
    ctx.stream.synchronize();  // usable on any stream from here on
    return p;
  }
  //! Returns `p` to its device's pool (stream-ordered after CudaSpace's own work).
  static void deallocate(void* p, std::size_t /*bytes*/) noexcept {
    if (!p) return;
    try {
      const int device = detail::CudaSpaceContext::device_of(p);
      cuda::DeviceGuard g{device};
      cuda::detail::ignore(cudaFreeAsync(p, detail::CudaSpaceContext::of(device).stream.get()));
    } catch (...) {  // the runtime is gone (static destruction) or the pointer is foreign: nothing to free into
    }
  }
  //! dst <- src, both device memory (any devices); finished on return.
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    const int device = detail::CudaSpaceContext::device_of(dst);
    cuda::DeviceGuard g{device};
    auto& ctx = detail::CudaSpaceContext::of(device);
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream.get()),
                "cudaMemcpyAsync (CudaSpace::copy)");
    ctx.stream.synchronize();
  }
  //! Zero bytes; finished on return.
  static void zero(void* p, std::size_t bytes) {
    if (bytes == 0) return;
    const int device = detail::CudaSpaceContext::device_of(p);
    cuda::DeviceGuard g{device};
    auto& ctx = detail::CudaSpaceContext::of(device);
    cuda::check(cudaMemsetAsync(p, 0, bytes, ctx.stream.get()), "cudaMemsetAsync (CudaSpace::zero)");
    ctx.stream.synchronize();
  }
  //! Device dst <- host src through pinned staging; finished on return.
  static void upload(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    const int device = detail::CudaSpaceContext::device_of(dst);
    cuda::DeviceGuard g{device};
    auto& ctx = detail::CudaSpaceContext::of(device);
    std::lock_guard lk(ctx.mu);
    ctx.stager.upload(ctx.stream.get(), dst, src, bytes);
    ctx.stream.synchronize();
  }
  //! Host dst <- device src through pinned staging; finished on return.
  static void download(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    const int device = detail::CudaSpaceContext::device_of(src);
    cuda::DeviceGuard g{device};
    auto& ctx = detail::CudaSpaceContext::of(device);
    std::lock_guard lk(ctx.mu);
    ctx.stager.download(ctx.stream.get(), dst, src, bytes);
  }
};

static_assert(MemorySpace<CudaSpace>);

//! A copy of host tensor `h` on the current device.
//!   strata::Tensor<float, strata::CudaSpace> d = strata::to_device(strata::Tensor<float>{{2, 2}, {1, 2, 3, 4}});
//!   // d.shape() == {2, 2}; its elements are on the GPU
template <Element T, MemorySpace S>
  requires S::host_accessible
Tensor<T, CudaSpace> to_device(const Tensor<T, S>& h) {
  Tensor<T, CudaSpace> d{h.shape()};
  CudaSpace::upload(d.data(), h.data(), h.bytes());
  return d;
}

//! A host copy of device tensor `d`.
//!   strata::Tensor<float> h = strata::to_host(d);
//!   CHECK(h(1, 0) == 3.f);
template <Element T>
Tensor<T> to_host(const Tensor<T, CudaSpace>& d) {
  Tensor<T> h{d.shape()};
  CudaSpace::download(h.data(), d.data(), d.bytes());
  return h;
}

}  // namespace strata
