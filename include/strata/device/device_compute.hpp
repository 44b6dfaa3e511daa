#pragma once
//! Which Compute (kernels/compute.hpp) runs a device's replica: the host's
//! for a CPU, the CUDA backend's for a GPU. The core never includes CUDA
//! headers: <strata/cuda.hpp> registers the GPU's maker when a program
//! includes it (and links strata's CUDA kernels).
//!   std::unique_ptr<strata::kernels::Compute> c = strata::detail::make_compute(strata::gpu(0), {});

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/threads/options.hpp>
#include <strata/core/error.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/device/device.hpp>

namespace strata {

//! The number format of a GPU replica's matrix products (kernels/compute.hpp).
using kernels::MatmulPrecision;

namespace detail {

class DeviceCollectives;  // device/device_collectives.hpp

//! What the CUDA backend tells the core (set by <strata/cuda.hpp>; empty without it).
struct GpuBackend {
  std::unique_ptr<kernels::Compute> (*make)(int device, MatmulPrecision precision) = nullptr;
  int (*count)() = nullptr;                  //!< usable GPUs (0: none, or no driver)
  std::string (*name)(int device) = nullptr;  //!< "NVIDIA H100 80GB HBM3"
  //! The collectives of GPU replicas (device/device_collectives.hpp).
  std::unique_ptr<DeviceCollectives> (*make_collectives)(const std::vector<Device>& devices,
                                                         CommOptions opts) = nullptr;
};

//! A GPU replica's compute and its copies of the variables' value and
//! gradient, in that compute's memory (what the executors of GPU replicas keep per replica).
struct DeviceReplicaBuffers {
  std::unique_ptr<kernels::Compute> c;
  kernels::Buffer<float> value, grad;
};

inline GpuBackend& gpu_backend() {
  static GpuBackend b;
  return b;
}

//! A compute owned by the caller for a GPU device (the host's is shared:
//! kernels::host_compute()). Throws when the CUDA backend is not in the program.
inline std::unique_ptr<kernels::Compute> make_compute(const Device& d, MatmulPrecision precision) {
  if (!d.is_gpu()) throw Error("strata: " + d.str() + " runs on the shared host compute (kernels::host_compute())");
  if (!gpu_backend().make)
    throw Error("strata: " + d.str() + " needs the CUDA backend: include <strata/cuda.hpp> in the program and link "
                "strata's CUDA kernels (Meson: dependency('strata-cuda'); else compile strata/cuda/strata_cuda.cu)");
  return gpu_backend().make(d.index, precision);
}

//! Where one replica of a mirrored executor computes and keeps its buffers:
//! on a GPU, a compute of its own (its memory the device's); on a CPU, none
//! (its programs compute on the host, its buffers in the host's memory).
//! An executor's per-replica state derives from it; the compute, declared
//! first, outlives the buffers made in its memory.
struct ReplicaDevice {
  std::unique_ptr<kernels::Compute> owned;  // a GPU's compute
  kernels::Compute* c = nullptr;            // that compute; null for a CPU replica
  kernels::Memory* m = nullptr;             // where its buffers live: the compute's, or the host's memory

  //! On device `d` (a GPU's compute made with `precision`, or the host's memory).
  void place_on(const Device& d, MatmulPrecision precision) {
    owned = d.is_gpu() ? make_compute(d, precision) : nullptr;
    c = owned.get();
    m = c ? static_cast<kernels::Memory*>(c) : &kernels::host_memory();
  }
  //! After a failed step: waits for what was queued (a collective's kernels
  //! may still touch a failed replica's buffers), at most `timeout` (work
  //! behind a collective waiting for a dead peer never ends: the caller goes
  //! on, saying so on stderr); its errors are dropped, the failure being
  //! reported is the one that counts. False: work was still pending.
  bool quiesce(std::chrono::milliseconds timeout = quiesce_timeout) noexcept {
    bool ended = true;
    try {
      ended = !m || m->synchronize_within(timeout);
      if (!ended)
        std::fprintf(stderr, "strata: %s: the work queued before the failed step had not ended after %lld ms; going "
                             "on without waiting for it\n",
                     m->name().c_str(), static_cast<long long>(timeout.count()));
    } catch (...) {
    }
    return ended;
  }
  //! How long quiesce waits by default.
  static constexpr std::chrono::milliseconds quiesce_timeout{std::chrono::seconds(60)};
};

}  // namespace detail

//! How many GPUs this program can train on: 0 without the CUDA backend
//! (<strata/cuda.hpp>), without a driver, or without a device.
//!   const strata::Device d = strata::gpu_count() ? strata::gpu(0) : strata::cpu(0);
inline int gpu_count() { return detail::gpu_backend().count ? detail::gpu_backend().count() : 0; }

//! "/gpu:0 (NVIDIA H100 80GB HBM3)", "/cpu:0": a device, as a person reads it.
inline std::string describe(const Device& d) {
  if (d.is_gpu() && detail::gpu_backend().name) return d.str() + " (" + detail::gpu_backend().name(d.index) + ")";
  return d.str();
}

}  // namespace strata
