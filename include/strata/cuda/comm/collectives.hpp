#pragma once
//! The CUDA backend's DeviceCollectives (device/device_collectives.hpp):
//! what MirroredStrategy's GPU replicas sum their gradients with, chosen by
//! choose_gpu_reduce (comm/gpu_choice.hpp) from where the replicas are: the
//! device team's collectives (device/device_team_collectives.hpp) over
//! CUDA, or host-staged.
//!   auto coll = strata::cuda::make_collectives(strata::virtual_gpus(0, 4), {});
//!   coll->choice();   // "4 replicas share GPU 0 (virtual GPUs): a direct reduce kernel ..."
//! The started forms (a gradient bucket's sum, ZeRO 2 and 3's layers) run
//! on a side stream of the replica's GPU, beside the compute's stream.

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/gpu_choice.hpp>
#include <strata/cuda/comm/communicator.hpp>
#include <strata/cuda/comm/peer_access.hpp>
#include <strata/cuda/comm/runtime.hpp>
#include <strata/cuda/compute.hpp>
#include <strata/device/device_collectives.hpp>
#include <strata/device/device_team_collectives.hpp>

namespace strata::cuda {

namespace detail {

//! Replica `rank`'s compute as a GPU's (a device team and NCCL reduce GPU memory).
inline CudaCompute& gpu_of(int rank, kernels::Compute& c, const char* who) {
  auto* gpu = dynamic_cast<CudaCompute*>(&c);
  if (!gpu)
    throw Error(std::string(who) + ": replica " + std::to_string(rank) + " computes on " + c.name() +
                ", not on a GPU (it reduces GPU memory)");
  return *gpu;
}

//! The CUDA runtime, with the stream of a replica's compute (DeviceTeamCollectives' R).
struct CollectivesRuntime : Runtime {
  static cudaStream_t stream_of(int rank, int, kernels::Compute& c, const char* who) {
    return gpu_of(rank, c, who).stream();
  }
};

using SideStreams = strata::detail::SideStreams<Runtime>;
using strata::detail::run_wire;

}  // namespace detail

//! The direct reduce kernel among replicas whose memories reach each other.
using DeviceTeamCollectives = strata::detail::DeviceTeamCollectives<detail::CollectivesRuntime>;

//! The automatic choice for GPU replicas `devices` (comm/gpu_choice.hpp),
//! or the one the environment variable STRATA_GPU_ALLREDUCE forces
//! (nccl, device_direct, host_staged; an impossible one is an Error naming why).
inline GpuReduceChoice choose_for(const std::vector<Device>& devices, bool nccl_available) {
  std::vector<int> index;
  for (const Device& d : devices) index.push_back(d.index);
  const char* force = std::getenv("STRATA_GPU_ALLREDUCE");
  return choose_gpu_reduce(index, nccl_available, peer_access, force ? force : "");
}

//! The collectives for a device_direct or host_staged choice `c`.
inline std::unique_ptr<strata::detail::DeviceCollectives> collectives_for(const GpuReduceChoice& c,
                                                                          const std::vector<Device>& devices,
                                                                          CommOptions opts) {
  if (c.kind == GpuReduce::host_staged)
    return std::make_unique<strata::detail::HostStagedCollectives>(static_cast<int>(devices.size()), opts, c.why);
  if (c.kind != GpuReduce::device_direct)
    throw Error("strata: " + std::string(gpu_reduce_name(c.kind)) + " chosen (" + c.why +
                ") in a program without it: include <strata/nccl.hpp> and link strata-nccl");
  return std::make_unique<DeviceTeamCollectives>(devices, opts, c.why);
}

//! The collectives of GPU replicas `devices` in a program without NCCL: the
//! direct kernel where their memories reach each other, else staged
//! through host memory (<strata/nccl.hpp> adds NCCL between distinct GPUs).
inline std::unique_ptr<strata::detail::DeviceCollectives> make_collectives(const std::vector<Device>& devices,
                                                                           CommOptions opts) {
  return collectives_for(choose_for(devices, /*nccl_available=*/false), devices, opts);
}

}  // namespace strata::cuda
