#pragma once
//! NCCL as the gradient all-reduce of MirroredStrategy's GPU replicas
//! (device/device_collectives.hpp) when each replica has its own GPU.
//!   auto coll = strata::nccl::make_collectives(strata::gpus({0, 1}), {});
//!   coll->choice();   // "2 replicas on 2 distinct GPUs (0, 1): NCCL, one communicator rank per GPU"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/cuda/comm/collectives.hpp>
#include <strata/cuda/nccl/team.hpp>

namespace strata::nccl {

//! One NCCL rank per replica (distinct GPUs), each replica's calls on its
//! compute's stream. After a failure the team is rebuilt at reset() (an
//! aborted NCCL communicator cannot be used again).
class NcclCollectives final : public strata::detail::DeviceCollectives {
 public:
  NcclCollectives(std::vector<int> devices, CommOptions opts, std::string why)
      : devices_(std::move(devices)), opts_(opts), why_(std::move(why)) {
    rebuild();
  }

  void all_reduce_sum(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    comm_of(rank, c).all_reduce(std::span<float>(data, n), Sum);
  }
  //! The started forms on the replica's side stream (cuda::detail::SideStreams), after what its
  //! compute's stream queued: NCCL's kernels run beside the backward (and ZeRO 3's forward). The
  //! replica's calls on either stream are issued in one order (those on the compute's stream after
  //! the host waited for every started one), as NCCL requires.
  Work all_reduce_sum_async(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    return side_of(rank, c).all_reduce_async(std::span<float>(data, n), Sum);
  }
  Work reduce_scatter_sum_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    return side_of(rank, c).reduce_scatter_async(std::span<const float>(in, n), std::span<float>(out, slice(n, rank)),
                                                 Sum);
  }
  Work all_gather_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    return side_of(rank, c).all_gather_async(std::span<const float>(in, slice(n, rank)), std::span<float>(out, n));
  }
  void broadcast(int rank, kernels::Compute& c, float* data, std::size_t n, int root) override {
    comm_of(rank, c).broadcast(std::span<float>(data, n), root);
  }
  void reduce_scatter_sum(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    NcclCommunicator& comm = comm_of(rank, c);
    comm.reduce_scatter(std::span<const float>(in, n), std::span<float>(out, slice(n, rank)), Sum);
  }
  void all_gather(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    NcclCommunicator& comm = comm_of(rank, c);
    comm.all_gather(std::span<const float>(in, slice(n, rank)), std::span<float>(out, n));
  }
  //! NCCL's bf16 and fp16 sums (in its ring's order, rounded at each step); started: on the side stream.
  Work wire(int rank, kernels::Compute& c, const strata::detail::WireCall& k) override {
    return cuda::detail::run_wire(k.started ? side_of(rank, c) : comm_of(rank, c), k, slice(k.n, rank));
  }
  void abort(int rank, const std::string& why) override { team_->abort(rank, why); }
  void reset() override {
    if (team_->aborted()) rebuild();
  }
  [[nodiscard]] const std::string& choice() const noexcept override { return why_; }

 private:
  [[nodiscard]] std::size_t slice(std::size_t n, int rank) const {
    return shard_range(n, devices_.size(), static_cast<std::size_t>(rank)).size();
  }
  //! Replica `rank`'s communicator on its compute's stream (each replica touches only its own slot).
  NcclCommunicator& comm_of(int rank, kernels::Compute& c) {
    const cudaStream_t stream = cuda::detail::gpu_of(rank, c, "NcclCollectives").stream();
    auto& comm = comms_[static_cast<std::size_t>(rank)];
    if (!comm || comm->stream() != stream) comm.emplace(team_->communicator(rank, stream));
    return *comm;
  }

  //! Replica `rank`'s communicator on its side stream, made to wait for its compute's stream.
  NcclCommunicator& side_of(int rank, kernels::Compute& c) {
    cuda::CudaCompute& gpu = cuda::detail::gpu_of(rank, c, "NcclCollectives");
    const cudaStream_t side = sides_.after(rank, gpu.stream(), gpu.device());
    auto& comm = side_comms_[static_cast<std::size_t>(rank)];
    if (!comm || comm->stream() != side) comm.emplace(team_->communicator(rank, side));
    return *comm;
  }

  void rebuild() {
    comms_.clear();
    side_comms_.clear();
    team_.reset();
    team_ = std::make_unique<NcclTeam>(devices_, opts_);
    comms_.resize(devices_.size());
    side_comms_.resize(devices_.size());
  }

  std::vector<int> devices_;
  CommOptions opts_;
  std::string why_;
  cuda::detail::SideStreams sides_{devices_.size()};  // before the team: its streams outlive the communicators
  std::unique_ptr<NcclTeam> team_;
  std::vector<std::optional<NcclCommunicator>> comms_;       // on each replica's compute stream
  std::vector<std::optional<NcclCommunicator>> side_comms_;  // on its side stream (the buckets')
};

//! The collectives of GPU replicas `devices` in a program with NCCL: NCCL
//! between distinct GPUs, else the CUDA backend's choice (direct kernel or
//! host-staged); STRATA_GPU_ALLREDUCE forces one.
inline std::unique_ptr<strata::detail::DeviceCollectives> make_collectives(const std::vector<Device>& devices,
                                                                           CommOptions opts) {
  const GpuReduceChoice c = cuda::choose_for(devices, /*nccl_available=*/true);
  if (c.kind != GpuReduce::nccl) return cuda::collectives_for(c, devices, opts);
  std::vector<int> index;
  for (const Device& d : devices) index.push_back(d.index);
  return std::make_unique<NcclCollectives>(std::move(index), opts, c.why);
}

}  // namespace strata::nccl
