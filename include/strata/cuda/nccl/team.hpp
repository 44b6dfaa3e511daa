#pragma once
//! NCCL in one process: a team of replica threads, one per GPU, each
//! holding an NcclCommunicator over one NCCL rank. The NCCL communicators are
//! made together from one thread (ncclGetUniqueId, then
//! ncclCommInitRankConfig for each GPU inside ncclGroupStart / ncclGroupEnd,
//! non-blocking, polled under the timeout); the replicas' calls are agreed
//! on the host through a detail::Team, as the thread communicator's are.
//! Every GPU of the team is given access to the others' stream-ordered
//! pools (where peer access allows), so buffers from cudaMallocAsync work.
//!   strata::NcclTeam team{{0, 1}, {.timeout = std::chrono::seconds(30)}};
//!   // in replica thread r, with a stream of GPU team.device(r):
//!   auto comm = team.communicator(r, stream);  comm.all_reduce(grad, strata::Sum);  comm.synchronize();

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/gpu_choice.hpp>
#include <strata/cuda/comm/peer_access.hpp>
#include <strata/cuda/nccl/communicator.hpp>
#include <strata/cuda/nccl/contract.hpp>
#include <strata/cuda/nccl/error.hpp>
#include <strata/cuda/nccl/identity.hpp>
#include <strata/cuda/nccl/rank.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/comm/threads/team.hpp>
#include <strata/cuda/device.hpp>

namespace strata {

//! The NCCL ranks of one process: rank r on GPU `devices[r]`, every GPU
//! distinct (two ranks on one GPU are a strata::Error naming them, raised
//! before NCCL sees them: NCCL refuses a duplicate GPU). Neither copyable nor
//! movable; its communicators must not outlive it. Destroying it finalizes
//! the NCCL communicators (aborts them after a failure, or when finalizing
//! takes longer than the timeout).
//!   strata::NcclTeam team{{0, 1, 2, 3}};
//!   auto comm = team.communicator(rank, stream);   // one per replica thread
class NcclTeam {
 public:
  //! One NCCL rank per GPU in `devices`; `opts.timeout` bounds the NCCL
  //! initialization and every wait of the team's communicators.
  //!   strata::NcclTeam team{{0, 1}};
  //!   strata::NcclTeam one{{0}};   // a 1-rank team: every call is still a real NCCL call
  explicit NcclTeam(std::vector<int> devices, CommOptions opts = {})
      : devices_(std::move(devices)), opts_(opts), team_(checked_size(devices_), opts) {
    grant_pools();
    init();
  }
  NcclTeam(const NcclTeam&) = delete;
  NcclTeam& operator=(const NcclTeam&) = delete;

  ~NcclTeam() {
    // After a failure a peer may be gone: finalizing could only time out.
    if (team_.aborted()) {
      const std::string why = team_.abort_reason();
      for (auto& r : ranks_) r->abort(why);
    }
    for (auto& r : ranks_) r->start_close();  // all at once: finalizing is collective
    const auto deadline = detail::nccl::Clock::now() + opts_.timeout;
    for (auto& r : ranks_) r->finish_close(deadline);
  }

  [[nodiscard]] int size() const noexcept { return static_cast<int>(devices_.size()); }
  //! The GPU of rank `rank`.
  [[nodiscard]] int device(int rank) const { return devices_.at(static_cast<std::size_t>(rank)); }
  [[nodiscard]] const std::vector<int>& devices() const noexcept { return devices_; }
  [[nodiscard]] const CommOptions& options() const noexcept { return opts_; }
  //! Whether a rank failed (its failure then ends every rank's next call).
  [[nodiscard]] bool aborted() const noexcept { return team_.aborted(); }
  //! Rank `rank` failed outside the team's calls (e.g. in its own step):
  //! every rank waiting in a call, or making the next one, stops at once
  //! with CollectiveAborted naming `why`.
  void abort(int rank, const std::string& why) { team_.abort(rank, why); }

  //! Rank `rank`'s communicator, its calls enqueued on `stream` (a stream of
  //! GPU device(rank)). Made in (or handed to) the replica thread that uses it.
  //!   strata::cuda::Stream s{team.device(r)};
  //!   auto comm = team.communicator(r, s.get());
  NcclCommunicator communicator(int rank, cudaStream_t stream) {
    if (rank < 0 || rank >= size())
      throw Error("strata: NcclTeam::communicator: " + std::to_string(rank) + " is not a rank of this team (0 .. " +
                  std::to_string(size() - 1) + ")");
    return NcclCommunicator(ranks_[static_cast<std::size_t>(rank)].get(), nullptr,
                            std::make_unique<detail::nccl::TeamContract>(team_, rank), stream, opts_);
  }

 private:
  //! The number of ranks, once the devices are known valid and distinct.
  static int checked_size(const std::vector<int>& devices) {
    if (devices.empty()) throw Error("strata: NcclTeam: no GPUs given; name one GPU per rank, e.g. {0, 1}");
    // First by index (no CUDA call: the sentence does not depend on the
    // devices existing), then each device, then the physical GPUs by UUID.
    std::vector<GpuIdentity> ids;
    const std::string host = nccl::host_name();
    for (int d : devices) ids.push_back(GpuIdentity{.host = host, .device = d, .uuid = {}});
    check_distinct_gpus(ids, "strata: NcclTeam");
    ids.clear();
    for (int d : devices) ids.push_back(nccl::local_gpu(d));
    check_distinct_gpus(ids, "strata: NcclTeam");
    return static_cast<int>(devices.size());
  }

  //! NCCL's ranks in one process read and write each other's buffers
  //! directly where the GPUs have peer access; peer access does not cover
  //! the stream-ordered pools (cudaMallocAsync) where replica buffers live,
  //! so every GPU of the team is given access to the others' pools.
  void grant_pools() const {
    for (int a : devices_)
      for (int b : devices_)
        if (a != b && cuda::peer_access(a, b)) cuda::grant_pool_access(a, b);
  }

  void init() {
    const int p = size();
    ncclUniqueId id{};
    nccl::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // nothing blocks: initialization is polled under the deadline
    std::vector<ncclConfig_t> configs(static_cast<std::size_t>(p), config);
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(p), nullptr);
    ncclResult_t failed = ncclSuccess;
    int failed_rank = -1;
    int previous = 0;
    cuda::check(cudaGetDevice(&previous), "cudaGetDevice");
    // One thread initializes every GPU's rank: inside a group, so that no
    // call waits for the ranks after it (and with each GPU current for its call).
    nccl::check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < p && failed == ncclSuccess; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      if (const cudaError_t e = cudaSetDevice(devices_[ur]); e != cudaSuccess) {
        cuda::detail::ignore(e);
        failed = ncclUnhandledCudaError;
      } else {
        const ncclResult_t res = ncclCommInitRankConfig(&comms[ur], p, id, r, &configs[ur]);
        if (res != ncclSuccess && res != ncclInProgress) failed = res;
      }
      if (failed != ncclSuccess) failed_rank = r;
    }
    const ncclResult_t end = ncclGroupEnd();
    cuda::detail::ignore(cudaSetDevice(previous));
    if (failed == ncclSuccess && end != ncclSuccess && end != ncclInProgress) failed = end;

    // Every rank's initialization goes on in the background: poll them all.
    const auto deadline = detail::nccl::Clock::now() + opts_.timeout;
    std::exception_ptr error;
    if (failed != ncclSuccess) {
      const bool in_group_end = failed_rank < 0;
      error = std::make_exception_ptr(
          nccl::error(failed, in_group_end ? "ncclGroupEnd" : "ncclCommInitRankConfig", failed_rank,
                      in_group_end ? -1 : devices_[static_cast<std::size_t>(failed_rank)], "NcclTeam"));
    }
    for (int r = 0; r < p && !error; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      const ncclResult_t state = detail::nccl::poll_state(comms[ur], deadline);
      if (state == ncclInProgress)
        error = std::make_exception_ptr(CollectiveTimeout(
            "strata: NcclTeam: NCCL did not initialize rank " + std::to_string(r) + " (GPU " +
            std::to_string(devices_[ur]) + ") within " + std::to_string(opts_.timeout.count()) + " ms"));
      else if (state != ncclSuccess)
        error = std::make_exception_ptr(nccl::error(state, "ncclCommInitRankConfig", r, devices_[ur], "NcclTeam"));
    }
    for (int r = 0; r < p; ++r)
      ranks_.push_back(std::make_unique<detail::nccl::Rank>(comms[static_cast<std::size_t>(r)], r, p,
                                                            devices_[static_cast<std::size_t>(r)], opts_.timeout));
    if (!error) return;
    const std::string why = detail::what_of(error);
    for (auto& r : ranks_) r->abort(why);  // every rank of the group: NCCL asks for all of them
    std::rethrow_exception(error);
  }

  std::vector<int> devices_;
  CommOptions opts_;
  detail::Team team_;
  std::vector<std::unique_ptr<detail::nccl::Rank>> ranks_;
};

}  // namespace strata
