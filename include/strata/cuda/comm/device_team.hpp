#pragma once
//! strata::DeviceTeam: the shared state of GPU replicas in one process whose
//! memories reach each other (several replicas on one GPU, "virtual GPUs",
//! or GPUs with peer access): the device team (comm/device/team.hpp) over
//! CUDA (runtime.hpp). The team's logic is written once; CI runs it with
//! the host standing in for the GPUs (comm/device/host_runtime.hpp).
//!   strata::DeviceTeam team{strata::virtual_gpus(0, 4)};
//!   // on replica thread r, with its own stream on GPU 0:
//!   auto comm = team.communicator(r, stream);
//!   comm.all_reduce(std::span<float>(grad, n), strata::Mean);

#include <vector>

#include <strata/comm/device/team.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/cuda/comm/runtime.hpp>
#include <strata/device/device.hpp>

namespace strata {

//! p GPU replicas of one process and their collectives' shared state.
//! Built once (enables peer access between the distinct GPUs it names);
//! each replica thread takes its communicator with communicator(r, stream).
//!   strata::DeviceTeam team{strata::virtual_gpus(0, 2), {.timeout = std::chrono::seconds(10)}};
class DeviceTeam : public BasicDeviceTeam<cuda::Runtime> {
 public:
  explicit DeviceTeam(const std::vector<Device>& replicas, CommOptions opts = {})
      : BasicDeviceTeam<cuda::Runtime>(detail::gpu_indices(replicas, "DeviceTeam"), opts) {}
};

}  // namespace strata
