#pragma once
//! The CUDA backend's DeviceCollectives (strategy/device_collectives.hpp):
//! what MirroredStrategy's GPU replicas sum their gradients with, chosen by
//! choose_gpu_reduce (comm/gpu_choice.hpp) from where the replicas are.
//!   auto coll = strata::cuda::make_collectives(strata::virtual_gpus(0, 4), {});
//!   coll->choice();   // "4 replicas share GPU 0 (virtual GPUs): a direct reduce kernel ..."

#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/cuda/communicator.hpp>
#include <strata/comm/gpu_choice.hpp>
#include <strata/cuda/compute.hpp>
#include <strata/strategy/device_collectives.hpp>

namespace strata::cuda {

//! The direct reduce kernel among replicas whose memories reach each other.
class DeviceTeamCollectives final : public strata::detail::DeviceCollectives {
 public:
  DeviceTeamCollectives(const std::vector<Device>& devices, CommOptions opts, std::string why)
      : team_(devices, opts), why_(std::move(why)) {}

  void all_reduce_sum(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    auto* gpu = dynamic_cast<CudaCompute*>(&c);
    if (!gpu)
      throw Error("DeviceTeamCollectives: replica " + std::to_string(rank) + " computes on " + c.name() +
                  ", not on a GPU (a device team reduces GPU memory)");
    DeviceCommunicator{team_, rank, gpu->stream()}.all_reduce(std::span<float>(data, n), Sum);
  }
  void abort(int rank, const std::string& why) override { team_.abort(rank, why); }
  void reset() override { team_.reset(); }
  [[nodiscard]] const std::string& choice() const noexcept override { return why_; }

 private:
  DeviceTeam team_;
  std::string why_;
};

//! Whether GPU `a` can read and write GPU `b`'s memory.
inline bool peer_access(int a, int b) {
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return can != 0;
}

//! The collectives of GPU replicas `devices`: the direct kernel where their
//! memories reach each other, else staged through host memory. The
//! environment variable STRATA_GPU_ALLREDUCE=device_direct|host_staged
//! forces one (an impossible one is an Error naming why).
inline std::unique_ptr<strata::detail::DeviceCollectives> make_collectives(const std::vector<Device>& devices,
                                                                           CommOptions opts) {
  std::vector<int> index;
  for (const Device& d : devices) index.push_back(d.index);
  const char* force = std::getenv("STRATA_GPU_ALLREDUCE");
  // NCCL is not wired into the executors yet: the choice is among the two paths that are.
  const GpuReduceChoice c = choose_gpu_reduce(index, /*nccl_available=*/false, peer_access, force ? force : "");
  if (c.kind == GpuReduce::host_staged)
    return std::make_unique<strata::detail::HostStagedCollectives>(static_cast<int>(devices.size()), opts, c.why);
  return std::make_unique<DeviceTeamCollectives>(devices, opts, c.why);
}

}  // namespace strata::cuda
