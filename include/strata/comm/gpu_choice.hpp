#pragma once
//! Where GPU replicas' collectives run, decided from where the replicas are,
//! and the one thing NCCL forbids (two ranks on one GPU), caught before NCCL
//! sees it. Plain C++ (no CUDA): the decisions and their sentences are tested
//! on machines without a GPU.
//!   auto c = strata::choose_gpu_reduce({0, 0, 0, 0}, /*nccl=*/true, peer);
//!   // c.kind == GpuReduce::device_direct, c.why: "4 replicas share GPU 0 (virtual GPUs): ..."
//!   strata::check_distinct_gpus(ranks_gpus, "NcclCommunicator::world");   // Error naming the ranks

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <strata/core/error.hpp>

namespace strata {

//! One rank's (or replica's) GPU as the other ranks see it: the host it is
//! on, its CUDA index there, and its UUID (the same physical GPU has the same
//! UUID whatever CUDA_VISIBLE_DEVICES renumbers; empty when unknown, then
//! host and index identify it).
struct GpuIdentity {
  std::string host;
  int device = 0;
  std::string uuid;
};

namespace detail {
inline bool same_gpu(const GpuIdentity& a, const GpuIdentity& b) {
  if (a.host != b.host) return false;
  if (!a.uuid.empty() && !b.uuid.empty()) return a.uuid == b.uuid;
  return a.device == b.device;
}
}  // namespace detail

//! Empty when every rank has its own GPU; otherwise one sentence per GPU
//! that two or more ranks share, and what to do instead. NCCL refuses such a
//! communicator ("Duplicate GPU detected"), and earlier versions hung in it.
//!   std::string why = strata::duplicate_gpus(ids);   // "ranks 0 and 1 both use GPU 0 (GPU-5e1c...) on node7"
inline std::string duplicate_gpus(std::span<const GpuIdentity> ranks) {
  std::string out;
  std::vector<bool> seen(ranks.size(), false);
  for (std::size_t a = 0; a < ranks.size(); ++a) {
    if (seen[a]) continue;
    std::vector<std::size_t> same{a};
    for (std::size_t b = a + 1; b < ranks.size(); ++b)
      if (!seen[b] && detail::same_gpu(ranks[a], ranks[b])) {
        same.push_back(b);
        seen[b] = true;
      }
    if (same.size() < 2) continue;
    std::string names;
    for (std::size_t i = 0; i < same.size(); ++i)
      names += (i == 0 ? "" : i + 1 == same.size() ? " and " : ", ") + std::to_string(same[i]);
    out += (out.empty() ? "" : "; ") + std::string("ranks ") + names + (same.size() == 2 ? " both" : " all") +
           " use GPU " + std::to_string(ranks[a].device) +
           (ranks[a].uuid.empty() ? std::string() : " (" + ranks[a].uuid + ")") + " on " +
           (ranks[a].host.empty() ? std::string("this host") : ranks[a].host);
  }
  return out;
}

//! Throws Error (naming `who`, the ranks and the GPU, and the ways out)
//! when two ranks share a GPU.
//!   strata::check_distinct_gpus(ids, "NcclCommunicator::world");
inline void check_distinct_gpus(std::span<const GpuIdentity> ranks, std::string_view who) {
  const std::string dup = duplicate_gpus(ranks);
  if (dup.empty()) return;
  throw Error(std::string(who) + ": " + dup +
              ". NCCL needs one GPU per rank (it refuses a duplicate GPU). Give each rank its own GPU "
              "(CUDA_VISIBLE_DEVICES=<local rank>, or strata::gpu(local_rank)), or run the replicas that share a "
              "GPU in one process as virtual GPUs (strata::virtual_gpus(device, n), reduced by a kernel in the "
              "GPU's memory), or reduce through host memory over MPI (GpuReduce::host_staged)");
}

//! How the replicas of one process reduce on their GPUs.
enum class GpuReduce {
  device_direct,  //!< a direct reduce kernel over every replica's buffer (one GPU, or GPUs with peer access)
  nccl,           //!< NCCL: one communicator rank per distinct GPU
  host_staged,    //!< download, reduce on the host (the thread or MPI communicator), upload
};

inline std::string_view gpu_reduce_name(GpuReduce g) noexcept {
  switch (g) {
    case GpuReduce::device_direct: return "device_direct";
    case GpuReduce::nccl: return "nccl";
    case GpuReduce::host_staged: return "host_staged";
  }
  return "?";
}

//! A decision and the sentence that explains it.
struct GpuReduceChoice {
  GpuReduce kind = GpuReduce::device_direct;
  std::string why;
};

namespace detail {
inline std::string list_devices(const std::map<int, int>& count) {
  std::string s;
  for (auto [d, n] : count) s += (s.empty() ? "" : ", ") + std::to_string(d) + (n > 1 ? " x" + std::to_string(n) : "");
  return s;
}
}  // namespace detail

//! The automatic choice for replicas on GPUs `devices` (one entry per
//! replica, a GPU index repeated for virtual GPUs) of one process:
//! - one GPU shared by every replica (virtual GPUs): device_direct, since
//!   NCCL cannot have two ranks on one GPU and the buffers share a memory;
//! - one replica per distinct GPU: NCCL when the program has it
//!   (`nccl_available`: built with -Dnccl and <strata/nccl.hpp> included);
//!   without it device_direct where every pair of GPUs reaches the other's
//!   memory (`peer(a, b)`), else host_staged;
//! - GPUs shared by some replicas: device_direct with peer access between
//!   every pair, else host_staged.
//! `force` (empty, "nccl", "device_direct" or "host_staged") overrides the
//! choice where it can run, and says so; an impossible force is an Error.
//!   auto c = strata::choose_gpu_reduce({0, 1}, true, [](int, int) { return true; });
//!   // nccl: "2 replicas on 2 distinct GPUs (0, 1): NCCL, one communicator rank per GPU"
inline GpuReduceChoice choose_gpu_reduce(std::span<const int> devices, bool nccl_available,
                                         const std::function<bool(int, int)>& peer, std::string_view force = {}) {
  if (devices.empty()) throw Error("choose_gpu_reduce: no replicas");
  std::map<int, int> count;
  for (int d : devices) ++count[d];
  const std::size_t p = devices.size();
  const bool distinct = count.size() == p;
  std::string no_peer;
  for (auto a = count.begin(); a != count.end() && no_peer.empty(); ++a)
    for (auto b = std::next(a); b != count.end(); ++b)
      if (!peer(a->first, b->first) || !peer(b->first, a->first)) {
        no_peer = "GPUs " + std::to_string(a->first) + " and " + std::to_string(b->first) +
                  " cannot access each other's memory";
        break;
      }
  const std::string where = std::to_string(p) + (p == 1 ? " replica" : " replicas");

  GpuReduceChoice c;
  if (count.size() == 1) {
    c = {GpuReduce::device_direct,
         p == 1 ? "1 replica on GPU " + std::to_string(devices[0]) + ": nothing to exchange (a copy on the device)"
                : where + " share GPU " + std::to_string(devices[0]) +
                      " (virtual GPUs): a direct reduce kernel over their buffers in its memory (NCCL cannot have "
                      "two ranks on one GPU)"};
  } else if (distinct && nccl_available) {
    c = {GpuReduce::nccl,
         where + " on " + std::to_string(p) + " distinct GPUs (" + detail::list_devices(count) +
             "): NCCL, one communicator rank per GPU"};
  } else if (no_peer.empty()) {
    c = {GpuReduce::device_direct,
         where + " on GPUs " + detail::list_devices(count) + ": " +
             (distinct ? std::string("NCCL is not in this program") : std::string("NCCL needs one rank per GPU")) +
             "; every pair of GPUs reaches the other's memory, so a direct reduce kernel reads the peers' buffers"};
  } else {
    c = {GpuReduce::host_staged,
         where + " on GPUs " + detail::list_devices(count) + ": " + no_peer + " and " +
             (distinct ? std::string("NCCL is not in this program") : std::string("NCCL needs one rank per GPU")) +
             ": staged through host memory"};
  }
  if (force.empty() || force == gpu_reduce_name(c.kind)) return c;

  const auto cannot = [&](const std::string& why) {
    throw Error("choose_gpu_reduce: cannot force " + std::string(force) + " for " + where + " on GPUs " +
                detail::list_devices(count) + ": " + why);
  };
  if (force == "nccl") {
    if (!nccl_available) cannot("NCCL is not in this program");
    if (!distinct) cannot("NCCL needs one rank per GPU and some replicas share a GPU");
    return {GpuReduce::nccl, "forced: nccl (automatic: " + c.why + ")"};
  }
  if (force == "device_direct") {
    if (!no_peer.empty()) cannot(no_peer);
    return {GpuReduce::device_direct, "forced: device_direct (automatic: " + c.why + ")"};
  }
  if (force == "host_staged") return {GpuReduce::host_staged, "forced: host_staged (automatic: " + c.why + ")"};
  throw Error("choose_gpu_reduce: unknown algorithm '" + std::string(force) +
              "'; use nccl, device_direct or host_staged");
}

//! How the workers (processes) of MultiWorkerMirroredStrategy with GPU
//! replicas sum their local sums, decided from the GPU of each worker's
//! local replica 0 (`leaders`, one per worker, the same on every worker):
//! - NCCL, one rank per worker on that GPU, where every worker's is its own
//!   GPU and the program has NCCL across workers (`nccl_available`:
//!   <strata/nccl_mpi.hpp> included);
//! - else staged through host memory over MPI (the worker's sum downloaded,
//!   all-reduced by the strategy's MPI communicator, uploaded).
//! `force` ("nccl" or "host_staged") overrides where it can run; an
//! impossible force is an Error naming why.
//!   auto c = strata::choose_worker_reduce(ids, true);
//!   // nccl: "2 workers, each on its own GPU: NCCL across workers, ..."
inline GpuReduceChoice choose_worker_reduce(std::span<const GpuIdentity> leaders, bool nccl_available,
                                            std::string_view force = {}) {
  const std::string where = std::to_string(leaders.size()) + " workers";
  const std::string dup = nccl_available ? duplicate_gpus(leaders) : std::string();
  GpuReduceChoice c;
  if (!nccl_available)
    c = {GpuReduce::host_staged,
         "NCCL across workers is not in this program (include <strata/nccl_mpi.hpp> and link strata-nccl): each "
         "worker's sum is staged through host memory and all-reduced over MPI"};
  else if (!dup.empty())
    c = {GpuReduce::host_staged,
         where + " share GPUs (" + dup + ", counting workers as ranks) and NCCL needs one GPU per rank: each "
                 "worker's sum is staged through host memory and all-reduced over MPI"};
  else
    c = {GpuReduce::nccl, where + ", each on its own GPU: NCCL across workers (one rank per worker, on the GPU of "
                                  "its local replica 0), after the sum of its local replicas on their devices"};
  if (force.empty() || force == gpu_reduce_name(c.kind)) return c;
  if (force == "nccl") {
    if (!nccl_available)
      throw Error("choose_worker_reduce: cannot force nccl across workers: NCCL across workers is not in this "
                  "program (include <strata/nccl_mpi.hpp> and link strata-nccl)");
    check_distinct_gpus(leaders, "choose_worker_reduce: cannot force nccl across workers");
  }
  if (force == "host_staged") return {GpuReduce::host_staged, "forced: host_staged (automatic: " + c.why + ")"};
  throw Error("choose_worker_reduce: unknown algorithm '" + std::string(force) + "' across workers; use nccl or "
              "host_staged");
}

}  // namespace strata
