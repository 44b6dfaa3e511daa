#pragma once
// For its scope, strata::gpu(i) devices compute on the host, each on a
// stand-in that reports itself as a device (kernels::DeviceStandIn:
// Where::StandIn, so every branch for a GPU runs, and the kernel bodies a
// GPU runs for its optimizers, activations and image windows), their
// collectives the device team's (device/stand_in_collectives.hpp: the
// logic GPU replicas run, over the host runtime), even in a program with
// the CUDA backend: how the executors of GPU replicas (device_executor.hpp,
// mirrored_executor.hpp on GPU replicas) are run and compared bitwise with
// the CPU ones on machines without a GPU. DenseOrder::Device: Dense adds its
// bias as a GPU does (within rounding of the CPU's, not bitwise).
#include <memory>

#include <strata/kernels/host/device_stand_in.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/device/stand_in_collectives.hpp>

namespace strata_test {

class HostAsGpu {
 public:
  explicit HostAsGpu(strata::kernels::DenseOrder order = strata::kernels::DenseOrder::Host)
      : saved_(strata::detail::gpu_backend()) {
    strata::detail::gpu_backend().make = order == strata::kernels::DenseOrder::Host ? &make<strata::kernels::DenseOrder::Host>
                                                                                    : &make<strata::kernels::DenseOrder::Device>;
    strata::detail::gpu_backend().make_collectives = &strata::detail::make_stand_in_collectives;
  }
  HostAsGpu(const HostAsGpu&) = delete;
  HostAsGpu& operator=(const HostAsGpu&) = delete;
  ~HostAsGpu() { strata::detail::gpu_backend() = saved_; }

 private:
  template <strata::kernels::DenseOrder Order>
  static std::unique_ptr<strata::kernels::Compute> make(int device, strata::MatmulPrecision) {
    return std::make_unique<strata::kernels::DeviceStandIn>(device, Order);
  }
  strata::detail::GpuBackend saved_;
};

}  // namespace strata_test
