#pragma once
//! CUDA as a device runtime for the device team (comm/device/team.hpp,
//! comm/device/communicator.hpp): its streams and events, copies, the
//! replicas' reduce kernel (launch.hpp), memory checks, message buffers and
//! a collective's completion (event_work.hpp). The host stand-in's runtime
//! with the same members is comm/device/host_runtime.hpp.
//!   strata::BasicDeviceTeam<strata::cuda::Runtime> team{{0, 0}};   // = strata::DeviceTeam
//!   strata::cuda::Runtime::copy(dst, src, bytes, stream, "broadcast");

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/cuda/comm/event_work.hpp>
#include <strata/cuda/comm/launch.hpp>
#include <strata/cuda/comm/peer_access.hpp>
#include <strata/cuda/device.hpp>
#include <strata/cuda/error.hpp>
#include <strata/cuda/stream.hpp>

namespace strata::cuda {

struct Runtime {
  using Stream = cudaStream_t;
  using Event = cuda::Event;
  using OwnedStream = cuda::Stream;
  using Guard = DeviceGuard;

  static void require_device(int device, const char* who) { cuda::require_device(device, who); }

  //! GPU `a` reaches GPU `b`'s memory (cudaMalloc's and the stream-ordered pool's), else an Error saying what to use.
  static void enable_peer(int a, int b) {
    int can = 0;
    check(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer");
    if (!can)
      throw Error("DeviceTeam: GPU " + std::to_string(a) + " cannot access GPU " + std::to_string(b) +
                  "'s memory (no peer access), so their replicas cannot reduce in each other's memory; use NCCL "
                  "(one replica per GPU) or the host-staged path (strata::choose_gpu_reduce says which applies)");
    {
      DeviceGuard g{a};
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) detail::ignore(e);
      else check(e, "cudaDeviceEnablePeerAccess");
    }
    // Peer access covers cudaMalloc memory, not the stream-ordered pool's,
    // where replicas' buffers live: GPU a must be given access to b's pool.
    grant_pool_access(a, b);
  }

  //! The GPU `s` belongs to (-1 where the runtime cannot say).
  static int device_of([[maybe_unused]] Stream s) {
#if CUDART_VERSION >= 12080
    int d = -1;
    check(cudaStreamGetDevice(s, &d), "cudaStreamGetDevice");
    return d;
#else
    return -1;
#endif
  }

  static void copy(void* dst, const void* src, std::size_t bytes, Stream s, const char* what) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), (std::string("cudaMemcpyAsync (") + what + ")").c_str());
  }

  template <class T>
  static void reduce(Stream s, strata::detail::OpKind op, const strata::detail::ReplicaBuffers<T>& b, std::size_t n,
                     std::size_t contributors) {
    detail::launch_reduce_replicas<T>(s, op, b, n, contributors);
  }

  //! `p` is device memory of GPU `device` (or managed memory), else an Error beginning with `who`.
  static void check_memory(const void* p, int device, const std::string& who) {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    detail::ignore(e);
    if (e != cudaSuccess || (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged))
      throw Error(who + " is host memory; a GPU replica's collectives take device memory of its GPU "
                        "(a Tensor<T, CudaSpace>, or memory from its CudaCompute)");
    if (a.type == cudaMemoryTypeDevice && a.device != device)
      throw Error(who + " is memory of GPU " + std::to_string(a.device) + ", not of the replica's GPU");
  }

  //! A message buffer: cudaMalloc memory (which peer access covers) of GPU `device`.
  static void* allocate_message(int device, std::size_t bytes) {
    DeviceGuard g{device};
    void* p = nullptr;
    check_allocation(cudaMalloc(&p, bytes), "cudaMalloc (message buffer)", bytes, device);
    return p;
  }
  //! The team ends: cudaFree waits for the device.
  static void free_message(int device, void* p) noexcept {
    int previous = -1;
    const bool got = cudaGetDevice(&previous) == cudaSuccess;
    if (got && previous != device) detail::ignore(cudaSetDevice(device));
    detail::ignore(cudaFree(p));
    if (got && previous != device) detail::ignore(cudaSetDevice(previous));
  }

  //! A Work over an event recorded now on `s`: its wait polls under `timeout`; past it, `abort` and CollectiveTimeout.
  static Work completion(int device, Stream s, std::string what, std::string who, std::chrono::milliseconds timeout,
                         std::function<void(const std::string&)> abort) {
    auto watch = std::make_shared<detail::DeadlineWatch>(std::move(who), timeout, std::move(abort));
    return Work(std::make_unique<detail::EventWork>(device, s, std::move(what), std::move(watch)));
  }

  //! Whether `e`'s recorded work ended within `timeout` (polled, never blocking in CUDA).
  static bool wait_bounded(const Event& e, std::chrono::milliseconds timeout) noexcept {
    return detail::wait_bounded([&] { return cudaEventQuery(e.get()); }, timeout);
  }
};

}  // namespace strata::cuda
