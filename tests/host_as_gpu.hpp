#pragma once
// For its scope, strata::gpu(i) devices compute on the host (a HostCompute
// per replica), their collectives staged through host memory, even in a
// program with the CUDA backend: how the executors of GPU replicas
// (device_executor.hpp, mirrored_executor.hpp on GPU replicas) are run and compared
// bitwise with the CPU ones on machines without a GPU.
#include <memory>

#include <strata/kernels/host/compute.hpp>
#include <strata/strategy/device_compute.hpp>

namespace strata_test {

class HostAsGpu {
 public:
  HostAsGpu() : saved_(strata::detail::gpu_backend()) {
    strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
      return std::make_unique<strata::kernels::HostCompute>();
    };
    strata::detail::gpu_backend().make_collectives = nullptr;  // host-staged
  }
  HostAsGpu(const HostAsGpu&) = delete;
  HostAsGpu& operator=(const HostAsGpu&) = delete;
  ~HostAsGpu() { strata::detail::gpu_backend() = saved_; }

 private:
  strata::detail::GpuBackend saved_;
};

}  // namespace strata_test
