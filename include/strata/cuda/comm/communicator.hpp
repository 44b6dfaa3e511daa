#pragma once
//! strata::DeviceCommunicator: one GPU replica's collectives with the other
//! replicas of its DeviceTeam (device_team.hpp), over device memory,
//! enqueued on the replica's stream: the device team's communicator
//! (comm/device/communicator.hpp, where its contract is written) over CUDA
//! (runtime.hpp: the reduce kernel, cudaMemcpyAsync, events).
//!   auto comm = team.communicator(r, stream);
//!   comm.all_reduce(std::span<float>(grad, n), strata::Mean);   // grad: device memory of the replica's GPU
//!   strata::Work w = comm.reduce_scatter_async(grad, shard, strata::Sum);  w.wait();

#include <strata/comm/communicator.hpp>
#include <strata/comm/device/communicator.hpp>
#include <strata/cuda/comm/device_team.hpp>
#include <strata/cuda/comm/runtime.hpp>

namespace strata {

using DeviceCommunicator = BasicDeviceCommunicator<cuda::Runtime>;

static_assert(AsyncCommunicator<DeviceCommunicator>);

}  // namespace strata
