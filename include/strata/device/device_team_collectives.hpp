#pragma once
//! DeviceTeamCollectives<R>: the gradient sums of device replicas whose
//! memories reach each other (device_collectives.hpp's interface), over a
//! device team (comm/device/team.hpp) on device runtime R: the direct reduce
//! kernel on GPUs (R = cuda::CollectivesRuntime, cuda/comm/collectives.hpp),
//! the host's reduce on stand-in GPUs (R = StandInCollectivesRuntime,
//! stand_in_collectives.hpp), so CI runs the logic a GPU runs. The started
//! forms (a gradient bucket's sum, ZeRO 2 and 3's layers) run on a side
//! stream of the replica's device (SideStreams), beside the compute's stream.
//! R adds to a device runtime
//!   static Stream stream_of(int rank, int device, kernels::Compute& c, const char* who);   // c's stream, else an Error
//!   strata::detail::DeviceTeamCollectives<R> coll{{strata::gpu(0), strata::gpu(0)}, {}, "why"};
//!   coll.all_reduce_sum(r, compute, grad, n);   // on replica r's thread, every replica

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/device/communicator.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/core/half.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/device/device.hpp>
#include <strata/device/device_collectives.hpp>

namespace strata::detail {

//! Per device replica, a second stream on its device where its gradient
//! buckets are summed (all_reduce_sum_async), so that a bucket's sum runs
//! beside the backward that goes on on the compute's stream, and the event
//! that hands each bucket over: the side stream waits (on the device, the
//! host does not) for what the compute's stream had queued when the bucket
//! started. The update's calls, queued after the host waited for the
//! bucket's Work, follow its sum. Made on first use.
template <class R>
class SideStreams {
 public:
  explicit SideStreams(std::size_t replicas) : sides_(replicas) {}
  //! Replica `rank`'s side stream on `device`, made to wait for the work queued on `compute` so far.
  typename R::Stream after(int rank, typename R::Stream compute, int device) {
    typename R::Guard g{device};
    std::optional<Side>& s = sides_.at(static_cast<std::size_t>(rank));
    if (!s) s.emplace(device);
    s->handoff.record(compute);
    s->handoff.wait(s->stream.get());
    return s->stream.get();
  }

 private:
  struct Side {
    explicit Side(int device) : stream(device) {}
    typename R::OwnedStream stream;
    typename R::Event handoff;  // made on the stream's device (the guard above)
  };
  std::vector<std::optional<Side>> sides_;
};

//! A WireCall (16-bit collectives: compression on device replicas) on
//! `comm`, replica `rank`'s communicator (a device team's or NCCL's) on the
//! stream the call runs on; `slice`: the elements of its reduce-scatter output.
template <class Comm>
Work run_wire(Comm& comm, const WireCall& k, std::size_t slice) {
  using Kind = WireCall::Kind;
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

//! The device team's reduce among replicas whose memories reach each other.
template <class R>
class DeviceTeamCollectives final : public DeviceCollectives {
 public:
  using Comm = BasicDeviceCommunicator<R>;

  DeviceTeamCollectives(const std::vector<Device>& devices, CommOptions opts, std::string why)
      : sides_(devices.size()), team_(gpu_indices(devices, "DeviceTeamCollectives"), opts), why_(std::move(why)) {}

  void all_reduce_sum(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    Comm{team_, rank, stream_of(rank, c)}.all_reduce(std::span<float>(data, n), Sum);
  }
  //! On the replica's side stream (SideStreams), after what its compute's stream queued.
  Work all_reduce_sum_async(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    return Comm{team_, rank, side_of(rank, c)}.all_reduce_async(std::span<float>(data, n), Sum);
  }
  Work reduce_scatter_sum_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    Comm comm{team_, rank, side_of(rank, c)};
    return comm.reduce_scatter_async(std::span<const float>(in, n), std::span<float>(out, slice(n, rank)), Sum);
  }
  Work all_gather_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    Comm comm{team_, rank, side_of(rank, c)};
    return comm.all_gather_async(std::span<const float>(in, slice(n, rank)), std::span<float>(out, n));
  }
  void broadcast(int rank, kernels::Compute& c, float* data, std::size_t n, int root) override {
    Comm{team_, rank, stream_of(rank, c)}.broadcast(std::span<float>(data, n), root);
  }
  void reduce_scatter_sum(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    Comm{team_, rank, stream_of(rank, c)}.reduce_scatter(std::span<const float>(in, n),
                                                         std::span<float>(out, slice(n, rank)), Sum);
  }
  void all_gather(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    Comm{team_, rank, stream_of(rank, c)}.all_gather(std::span<const float>(in, slice(n, rank)),
                                                     std::span<float>(out, n));
  }
  //! The reduce over 16-bit elements (added in FP32, rounded once); started: on the side stream.
  Work wire(int rank, kernels::Compute& c, const WireCall& k) override {
    Comm comm{team_, rank, k.started ? side_of(rank, c) : stream_of(rank, c)};
    return run_wire(comm, k, slice(k.n, rank));
  }
  void abort(int rank, const std::string& why) override { team_.abort(rank, why); }
  void reset() override { team_.reset(); }
  [[nodiscard]] const std::string& choice() const noexcept override { return why_; }

  //! The team (tests count its events and message buffers).
  [[nodiscard]] const BasicDeviceTeam<R>& team() const noexcept { return team_; }

 private:
  [[nodiscard]] std::size_t slice(std::size_t n, int rank) const {
    return shard_range(n, static_cast<std::size_t>(team_.size()), static_cast<std::size_t>(rank)).size();
  }
  typename R::Stream stream_of(int rank, kernels::Compute& c) const {
    return R::stream_of(rank, team_.devices()[static_cast<std::size_t>(rank)], c, "DeviceTeamCollectives");
  }
  //! Replica `rank`'s side stream, made to wait for its compute's stream (the started forms').
  typename R::Stream side_of(int rank, kernels::Compute& c) {
    return sides_.after(rank, stream_of(rank, c), team_.devices()[static_cast<std::size_t>(rank)]);
  }

  SideStreams<R> sides_;  // declared first: its streams outlive the team's work on them
  BasicDeviceTeam<R> team_;
  std::string why_;
};

}  // namespace strata::detail
