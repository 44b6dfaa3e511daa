#pragma once
//! The CUDA backend, opt in: GPU tensors (CudaSpace), the GPU compute
//! (cuda::CudaCompute, cuda::make_compute), streams, events and graphs.
//! Including it also registers the GPU with the strategies, so that
//! strata::gpu(i) devices train on a CudaCompute. The program links the
//! backend's kernels (Meson: dependency('strata-cuda'); otherwise compile
//! include/strata/cuda/strata_cuda.cu once with nvcc, see cuda/compute.hpp).
//!   #include <strata/cuda.hpp>
//!   strata::OneDeviceStrategy s{strata::gpu(0)};

#include <strata/cuda/comm/collectives.hpp>
#include <strata/cuda/compute.hpp>
#include <strata/cuda/device.hpp>
#include <strata/cuda/error.hpp>
#include <strata/cuda/graph.hpp>
#include <strata/cuda/make_compute.hpp>
#include <strata/cuda/stream.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/cuda/space.hpp>

namespace strata::cuda::detail {

//! Fills strata::detail::gpu_backend() during static initialization of any
//! translation unit that includes this header.
inline const bool backend_registered = [] {
  auto& b = strata::detail::gpu_backend();
  b.make = &make_compute;
  b.count = [] { return device_count(); };
  b.name = [](int device) { return device_name(device); };
  b.make_collectives = &make_collectives;
  return true;
}();

}  // namespace strata::cuda::detail
