#pragma once
//! The CUDA backend's DeviceCollectives (strategy/device_collectives.hpp):
//! what MirroredStrategy's GPU replicas sum their gradients with, chosen by
//! choose_gpu_reduce (comm/gpu_choice.hpp) from where the replicas are.
//!   auto coll = strata::cuda::make_collectives(strata::virtual_gpus(0, 4), {});
//!   coll->choice();   // "4 replicas share GPU 0 (virtual GPUs): a direct reduce kernel ..."
//! The started forms (a gradient bucket's sum, ZeRO 2 and 3's layers) run
//! on a side stream of the replica's GPU, beside the compute's stream.

#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/cuda/comm/communicator.hpp>
#include <strata/cuda/comm/peer_access.hpp>
#include <strata/comm/gpu_choice.hpp>
#include <strata/cuda/compute.hpp>
#include <strata/cuda/stream.hpp>
#include <strata/strategy/device_collectives.hpp>

namespace strata::cuda {

namespace detail {

//! Per GPU replica, a second stream on its GPU where its gradient buckets
//! are summed (all_reduce_sum_async), so that a bucket's sum runs beside the
//! backward that goes on on the compute's stream, and the event that hands
//! each bucket over: the side stream waits (on the device, the host does
//! not) for what the compute's stream had queued when the bucket started.
//! The update's calls, queued after the host waited for the bucket's Work,
//! follow its sum. Made on first use.
class SideStreams {
 public:
  explicit SideStreams(std::size_t replicas) : sides_(replicas) {}
  //! Replica `rank`'s side stream, made to wait for the work queued on `gpu`'s stream so far.
  cudaStream_t after(int rank, CudaCompute& gpu) {
    DeviceGuard g{gpu.device()};
    std::optional<Side>& s = sides_.at(static_cast<std::size_t>(rank));
    if (!s) s.emplace(gpu.device());
    s->handoff.record(gpu.stream());
    s->handoff.wait(s->stream.get());
    return s->stream.get();
  }

 private:
  struct Side {
    explicit Side(int device) : stream(device) {}
    Stream stream;
    Event handoff;  // made on the stream's device (the guard above)
  };
  std::vector<std::optional<Side>> sides_;
};

//! Replica `rank`'s compute as a GPU's (a device team and NCCL reduce GPU memory).
inline CudaCompute& gpu_of(int rank, kernels::Compute& c, const char* who) {
  auto* gpu = dynamic_cast<CudaCompute*>(&c);
  if (!gpu)
    throw Error(std::string(who) + ": replica " + std::to_string(rank) + " computes on " + c.name() +
                ", not on a GPU (it reduces GPU memory)");
  return *gpu;
}

//! A WireCall (16-bit collectives: compression on GPU replicas) on `comm`,
//! replica `rank`'s communicator (a device team's or NCCL's) on the stream
//! the call runs on; `slice`: the elements of its reduce-scatter output.
template <class Comm>
Work run_wire(Comm& comm, const strata::detail::WireCall& k, std::size_t slice) {
  using Kind = strata::detail::WireCall::Kind;
  return visit_wire(k.format, [&](auto t) -> Work {
    using T = decltype(t);
    const std::span<T> out(static_cast<T*>(k.out), k.kind == Kind::reduce_scatter ? slice : k.n);
    switch (k.kind) {
      case Kind::reduce_scatter: {
        const std::span<const T> in(static_cast<const T*>(k.in), k.n);
        if (k.started) return comm.reduce_scatter_async(in, out, Sum);
        comm.reduce_scatter(in, out, Sum);
        return Work{};
      }
      case Kind::broadcast:
        if (k.started) return comm.broadcast_async(out, k.root);
        comm.broadcast(out, k.root);
        return Work{};
      case Kind::all_reduce: break;
    }
    if (k.started) return comm.all_reduce_async(out, Sum);
    comm.all_reduce(out, Sum);
    return Work{};
  });
}

}  // namespace detail

//! The direct reduce kernel among replicas whose memories reach each other.
class DeviceTeamCollectives final : public strata::detail::DeviceCollectives {
 public:
  DeviceTeamCollectives(const std::vector<Device>& devices, CommOptions opts, std::string why)
      : sides_(devices.size()), team_(devices, opts), why_(std::move(why)) {}

  void all_reduce_sum(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    DeviceCommunicator{team_, rank, stream_of(rank, c)}.all_reduce(std::span<float>(data, n), Sum);
  }
  //! On the replica's side stream (detail::SideStreams), after what its compute's stream queued.
  Work all_reduce_sum_async(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    return DeviceCommunicator{team_, rank, side_of(rank, c)}.all_reduce_async(std::span<float>(data, n), Sum);
  }
  Work reduce_scatter_sum_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    DeviceCommunicator comm{team_, rank, side_of(rank, c)};
    return comm.reduce_scatter_async(std::span<const float>(in, n), std::span<float>(out, slice(n, rank)), Sum);
  }
  Work all_gather_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    DeviceCommunicator comm{team_, rank, side_of(rank, c)};
    return comm.all_gather_async(std::span<const float>(in, slice(n, rank)), std::span<float>(out, n));
  }
  void broadcast(int rank, kernels::Compute& c, float* data, std::size_t n, int root) override {
    DeviceCommunicator{team_, rank, stream_of(rank, c)}.broadcast(std::span<float>(data, n), root);
  }
  void reduce_scatter_sum(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    DeviceCommunicator{team_, rank, stream_of(rank, c)}.reduce_scatter(
        std::span<const float>(in, n), std::span<float>(out, slice(n, rank)), Sum);
  }
  void all_gather(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    DeviceCommunicator{team_, rank, stream_of(rank, c)}.all_gather(std::span<const float>(in, slice(n, rank)),
                                                                   std::span<float>(out, n));
  }
  //! The reduce kernel over 16-bit elements (added in FP32, rounded once); started: on the side stream.
  Work wire(int rank, kernels::Compute& c, const strata::detail::WireCall& k) override {
    DeviceCommunicator comm{team_, rank, k.started ? side_of(rank, c) : stream_of(rank, c)};
    return detail::run_wire(comm, k, slice(k.n, rank));
  }
  void abort(int rank, const std::string& why) override { team_.abort(rank, why); }
  void reset() override { team_.reset(); }
  [[nodiscard]] const std::string& choice() const noexcept override { return why_; }

 private:
  [[nodiscard]] std::size_t slice(std::size_t n, int rank) const {
    return shard_range(n, static_cast<std::size_t>(team_.size()), static_cast<std::size_t>(rank)).size();
  }
  static cudaStream_t stream_of(int rank, kernels::Compute& c) {
    return detail::gpu_of(rank, c, "DeviceTeamCollectives").stream();
  }
  //! Replica `rank`'s side stream, made to wait for its compute's stream (the started forms').
  cudaStream_t side_of(int rank, kernels::Compute& c) {
    return sides_.after(rank, detail::gpu_of(rank, c, "DeviceTeamCollectives"));
  }

  detail::SideStreams sides_;  // declared first: its streams outlive the team's work on them
  DeviceTeam team_;
  std::string why_;
};

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
