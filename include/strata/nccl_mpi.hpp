#pragma once
//! NCCL across workers, opt in, for programs with both the MPI and the NCCL
//! backends (link strata-mpi and strata-nccl): once included,
//! MultiWorkerMirroredStrategy's GPU replicas sum across workers with NCCL
//! (one rank per worker, on the GPU of its local replica 0) wherever every
//! worker's replica 0 has a GPU of its own; workers that share a GPU keep
//! the host-staged MPI sum, and say so (strata::choose_worker_reduce).
//! STRATA_WORKER_ALLREDUCE=nccl|host_staged forces one (the same on every
//! worker: the workers check that they agree).
//!   #include <strata/nccl_mpi.hpp>
//!   strata::MultiWorkerMirroredStrategy s{{strata::gpu(local_rank)}};   // under mpirun, NCCL between workers

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/comm/gpu_choice.hpp>
#include <strata/comm/mpi/communicator.hpp>
#include <strata/cuda/nccl/world.hpp>
#include <strata/nccl.hpp>
#include <strata/device/worker_sum.hpp>

namespace strata::nccl {

//! The sum across workers over NCCL, on local replica 0's stream.
class NcclWorkerSum final : public strata::detail::WorkerSum {
 public:
  NcclWorkerSum(NcclCommunicator comm, std::string why) : comm_(std::move(comm)), why_(std::move(why)) {}
  void all_reduce_sum(kernels::Compute& /*c*/, float* data, std::size_t n) override {
    comm_.all_reduce(std::span<float>(data, n), Sum);
  }
  //! NCCL's bf16 and fp16 sums (compression on GPU replicas).
  void all_reduce_sum(kernels::Compute& /*c*/, WireFormat f, void* data, std::size_t n) override {
    visit_wire(f, [&](auto t) { comm_.all_reduce(std::span<decltype(t)>(static_cast<decltype(t)*>(data), n), Sum); });
  }
  [[nodiscard]] const std::string& choice() const noexcept override { return why_; }

 private:
  NcclCommunicator comm_;
  std::string why_;
};

namespace detail {

//! STRATA_WORKER_ALLREDUCE as a number every worker can compare.
inline std::int64_t force_code(std::string_view force) {
  if (force.empty()) return 0;
  if (force == "nccl") return 1;
  if (force == "host_staged") return 2;
  return 3;  // unknown: choose_worker_reduce names it
}

//! What <strata/nccl_mpi.hpp> registers (device/worker_sum.hpp): every
//! worker's replica-0 GPU and forcing are gathered over MPI, the choice is
//! made from the same data on every worker, then NCCL's communicator is
//! made (NcclCommunicator::world) or the host-staged sum kept.
inline std::unique_ptr<strata::detail::WorkerSum> make_worker_sum(MpiCommunicator& mpi, const Device& leader,
                                                                  kernels::Compute& c,
                                                                  strata::detail::HostSums host_sum) {
  namespace dn = strata::detail::nccl;
  auto* gpu = dynamic_cast<cuda::CudaCompute*>(&c);
  const char* env = std::getenv("STRATA_WORKER_ALLREDUCE");
  const std::string force = env ? env : "";

  constexpr std::size_t gpu_words = sizeof(dn::WireGpu) / sizeof(std::int64_t);
  std::array<std::int64_t, gpu_words + 2> mine{};
  {
    const dn::WireGpu w = dn::describe_gpu(leader.index, gpu ? gpu->stream() : nullptr);
    std::memcpy(mine.data(), &w, sizeof(w));
    mine[gpu_words] = force_code(force);
    mine[gpu_words + 1] = gpu ? 1 : 0;
  }
  const auto p = static_cast<std::size_t>(mpi.size());
  std::vector<std::int64_t> all(mine.size() * p);
  mpi.all_gather(mine, all);

  std::vector<GpuIdentity> ids;
  bool on_gpus = true;
  for (std::size_t w = 0; w < p; ++w) {
    const std::int64_t* at = all.data() + w * mine.size();
    if (at[gpu_words] != mine[gpu_words])
      throw Error("strata: the workers disagree on STRATA_WORKER_ALLREDUCE (worker " + std::to_string(w) +
                  " and worker " + std::to_string(mpi.rank()) + " differ): set it alike on every worker");
    on_gpus = on_gpus && at[gpu_words + 1] == 1;
    ids.push_back(dn::identity_of(dn::read_wire_gpu(at)));
  }
  if (!on_gpus) {  // replicas on another compute (the host's, in tests) cannot take NCCL
    if (force == "nccl")
      throw Error("strata: cannot force nccl across workers: local replica 0 of some worker does not compute on a "
                  "GPU");
    return std::make_unique<strata::detail::HostStagedWorkerSum>(
        std::move(host_sum), "local replica 0 of some worker does not compute on a GPU: each worker's sum is staged "
                             "through host memory and all-reduced over MPI");
  }
  const GpuReduceChoice choice = choose_worker_reduce(ids, /*nccl_available=*/true, force);
  if (choice.kind != GpuReduce::nccl)
    return std::make_unique<strata::detail::HostStagedWorkerSum>(std::move(host_sum), choice.why);
  CommOptions opts;
  opts.timeout = mpi.options().timeout;
  return std::make_unique<NcclWorkerSum>(NcclCommunicator::world(mpi, leader.index, gpu->stream(), opts),
                                         choice.why);
}

}  // namespace detail
}  // namespace strata::nccl

namespace strata::detail {

inline const bool nccl_worker_sum_registered = [] {
  nccl_worker_sum<MpiCommunicator>().make = &strata::nccl::detail::make_worker_sum;
  return true;
}();

}  // namespace strata::detail
