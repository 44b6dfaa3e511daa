#pragma once
// For its scope, strata::gpu(i) devices compute on the host (a HostCompute
// per replica) in a program without the CUDA backend: how the executors of
// GPU replicas (device_executor.hpp, device_mirrored_executor.hpp) are run
// and compared bitwise with the CPU ones on machines without a GPU.
#include <memory>

#include <strata/kernels/host/compute.hpp>
#include <strata/strategy/device_compute.hpp>

namespace strata_test {

class HostAsGpu {
 public:
  HostAsGpu() : saved_(strata::detail::gpu_backend().make) {
    strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
      return std::make_unique<strata::kernels::HostCompute>();
    };
  }
  HostAsGpu(const HostAsGpu&) = delete;
  HostAsGpu& operator=(const HostAsGpu&) = delete;
  ~HostAsGpu() { strata::detail::gpu_backend().make = saved_; }

 private:
  decltype(strata::detail::gpu_backend().make) saved_;
};

}  // namespace strata_test
