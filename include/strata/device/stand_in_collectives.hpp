#pragma once
//! The collectives of stand-in GPUs (kernels::DeviceStandIn: host computes
//! that report themselves as GPUs): the device team's collectives
//! (device_team_collectives.hpp) over the host runtime
//! (comm/device/host_runtime.hpp), chosen as a GPU program chooses
//! (comm/gpu_choice.hpp: every stand-in reaches every other's memory, so
//! device_direct; STRATA_GPU_ALLREDUCE=host_staged forces the staged path).
//! How CI runs, without a GPU, the device team's logic, the side streams and
//! the buckets handed over by events that GPU replicas run.
//!   strata::detail::gpu_backend().make_collectives = &strata::detail::make_stand_in_collectives;
//!   auto coll = strata::detail::make_stand_in_collectives(strata::virtual_gpus(0, 2), {});
//!   coll->choice();   // "stand-in GPUs in host memory: 2 replicas share GPU 0 (virtual GPUs): a direct reduce kernel ..."

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/device/host_runtime.hpp>
#include <strata/comm/gpu_choice.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/core/error.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/device/device.hpp>
#include <strata/device/device_collectives.hpp>
#include <strata/device/device_team_collectives.hpp>

namespace strata::detail {

//! The host runtime, with the stream of a stand-in replica's compute
//! (DeviceTeamCollectives' R): its device's, whatever host compute stands in
//! for the GPU (a DeviceStandIn, or a test's HostCompute said to be a GPU's).
struct StandInCollectivesRuntime : HostRuntime {
  static HostStream stream_of(int, int device, kernels::Compute&, const char*) noexcept { return HostStream{device}; }
};

using StandInTeamCollectives = DeviceTeamCollectives<StandInCollectivesRuntime>;

//! The collectives of stand-in replicas `devices` (GPU devices computing on DeviceStandIn).
inline std::unique_ptr<DeviceCollectives> make_stand_in_collectives(const std::vector<Device>& devices,
                                                                    CommOptions opts) {
  std::vector<int> index;
  for (const Device& d : devices) index.push_back(d.index);
  const char* force = std::getenv("STRATA_GPU_ALLREDUCE");
  const GpuReduceChoice c =
      choose_gpu_reduce(index, /*nccl_available=*/false, [](int, int) { return true; }, force ? force : "");
  const std::string why = "stand-in GPUs in host memory: " + c.why;
  if (c.kind == GpuReduce::host_staged)
    return std::make_unique<HostStagedCollectives>(static_cast<int>(devices.size()), opts, why);
  if (c.kind != GpuReduce::device_direct)
    throw Error("strata: " + std::string(gpu_reduce_name(c.kind)) + " chosen (" + c.why +
                ") for stand-in GPUs, which have only the device team's direct reduce and the host-staged path");
  return std::make_unique<StandInTeamCollectives>(devices, opts, why);
}

}  // namespace strata::detail
