#pragma once
//! The shared state of GPU replicas in one process whose memories reach
//! each other: several replicas on one GPU ("virtual GPUs") or on GPUs with
//! peer access. The host side of every collective is the CPU team's
//! (comm/threads/team.hpp): the replicas publish their calls and device
//! buffers, agree on them (else CollectiveMismatch naming each call) and
//! wait with a deadline (else CollectiveTimeout naming who is missing). The
//! device side is ordered by two events per replica: "ready" (its buffers
//! hold what it passed in) and "done" (it finished reading and writing the
//! others' buffers), which the other replicas' streams wait for: the host
//! never waits for the GPU.
//!   strata::DeviceTeam team{strata::virtual_gpus(0, 4)};
//!   // on replica thread r, with its own stream on GPU 0:
//!   auto comm = team.communicator(r, stream);
//!   comm.all_reduce(std::span<float>(grad, n), strata::Mean);

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <strata/cuda/comm/launch.hpp>
#include <strata/cuda/comm/message_buffers.hpp>
#include <strata/cuda/comm/peer_access.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/comm/threads/team.hpp>
#include <strata/core/error.hpp>
#include <strata/cuda/device.hpp>
#include <strata/cuda/error.hpp>
#include <strata/cuda/stream.hpp>
#include <strata/strategy/device.hpp>

namespace strata {

class DeviceCommunicator;

//! p GPU replicas of one process and their collectives' shared state.
//! Built once (enables peer access between the distinct GPUs it names);
//! each replica thread takes its communicator with communicator(r, stream).
//!   strata::DeviceTeam team{strata::virtual_gpus(0, 2), {.timeout = std::chrono::seconds(10)}};
class DeviceTeam {
 public:
  explicit DeviceTeam(const std::vector<Device>& replicas, CommOptions opts = {})
      : devices_(gpu_indices(replicas)), team_(static_cast<int>(devices_.size()), opts) {
    std::set<int> distinct(devices_.begin(), devices_.end());
    for (int d : distinct) cuda::require_device(d, "DeviceTeam");
    for (int a : distinct)
      for (int b : distinct)
        if (a != b) enable_peer(a, b);
    distinct_.assign(distinct.begin(), distinct.end());
    for (int d : devices_) {
      cuda::DeviceGuard g{d};
      ready_.emplace_back();
      done_.emplace_back();
    }
    for (int from : devices_)
      for (int to : devices_) channels_.push_back(std::make_unique<cuda::detail::MessageChannel>(from, to));
  }
  DeviceTeam(const DeviceTeam&) = delete;
  DeviceTeam& operator=(const DeviceTeam&) = delete;

  [[nodiscard]] int size() const noexcept { return static_cast<int>(devices_.size()); }
  //! The GPU of each replica.
  [[nodiscard]] const std::vector<int>& devices() const noexcept { return devices_; }
  [[nodiscard]] const CommOptions& options() const noexcept { return team_.options(); }

  //! Replica `rank`'s communicator: its calls are enqueued on `stream`, a
  //! stream of the replica's GPU (CudaError otherwise).
  DeviceCommunicator communicator(int rank, cudaStream_t stream);

  //! Replica `r` failed: every replica waiting in a collective is released
  //! with CollectiveAborted naming `why`.
  void abort(int r, const std::string& why) { team_.abort(r, why); }
  //! Replica `r` returned from its function (a collective it never called
  //! can no longer complete: the others say so at once).
  void depart(int r) { team_.depart(r); }
  //! Called while no replica runs: forget the previous run (counters, abort).
  void reset() { team_.reset(); }
  //! After a failure inside a collective: waits until every replica's work
  //! already queued in the team's collectives has finished (another
  //! replica's kernel may still be writing a buffer its owner is about to
  //! free or reuse). Bounded: it polls each replica's "done" event (recorded
  //! after its part of the last collective) until options().timeout has
  //! passed, never cudaDeviceSynchronize (which would also wait for work
  //! outside the team, such as an NCCL sum whose peer is gone). Returns ""
  //! when everything ended, else what is still pending, for the error being
  //! reported ("replica 1 (GPU 0): its part of the last collective has not
  //! ended after 120000 ms"). Its own CUDA errors are not reported: the
  //! failure being reported is the one that counts.
  //!   if (std::string pending = team.quiesce(); !pending.empty()) why += "; " + pending;
  [[nodiscard]] std::string quiesce() const noexcept {
    try {
      const auto deadline = std::chrono::steady_clock::now() + options().timeout;
      std::string pending;
      for (int r = 0; r < size(); ++r) {
        const cudaEvent_t e = done(r);
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero()));
        if (cuda::detail::wait_bounded([&] { return cudaEventQuery(e); }, left)) continue;
        pending += std::string(pending.empty() ? "" : "; ") + "replica " + std::to_string(r) + " (GPU " +
                   std::to_string(devices_[static_cast<std::size_t>(r)]) +
                   "): its part of the last collective has not ended on the GPU after " +
                   std::to_string(options().timeout.count()) +
                   " ms (its stream is held by earlier work); its buffers may still be in use";
      }
      return pending;
    } catch (...) {
      return "the wait for the team's queued work failed (out of memory for its message)";
    }
  }

  // For DeviceCommunicator.
  detail::Team& host_team() noexcept { return team_; }
  [[nodiscard]] cudaEvent_t ready(int r) const noexcept { return ready_[static_cast<std::size_t>(r)].get(); }
  [[nodiscard]] cudaEvent_t done(int r) const noexcept { return done_[static_cast<std::size_t>(r)].get(); }
  //! The message buffers from replica `from` to replica `to` (send / recv).
  cuda::detail::MessageChannel& channel(int from, int to) noexcept {
    return *channels_[static_cast<std::size_t>(from * size() + to)];
  }
  //! How many message buffers the team holds (they are reused from step to step).
  [[nodiscard]] std::size_t message_buffers() const {
    std::size_t n = 0;
    for (const auto& c : channels_) n += c->buffers();
    return n;
  }

 private:
  static std::vector<int> gpu_indices(const std::vector<Device>& replicas) {
    if (replicas.empty()) throw Error("DeviceTeam: no replicas (name GPUs: strata::virtual_gpus(0, 4), strata::gpus({0, 1}))");
    if (replicas.size() > static_cast<std::size_t>(cuda::detail::max_device_replicas))
      throw Error("DeviceTeam: " + std::to_string(replicas.size()) + " replicas; a device team holds at most " +
                  std::to_string(cuda::detail::max_device_replicas));
    std::vector<int> d;
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      if (!replicas[r].is_gpu())
        throw Error("DeviceTeam: replica " + std::to_string(r) + " is " + replicas[r].str() +
                    "; a device team holds GPU replicas (CPU replicas use the thread team)");
      d.push_back(replicas[r].index);
    }
    return d;
  }

  static void enable_peer(int a, int b) {
    int can = 0;
    cuda::check(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer");
    if (!can)
      throw Error("DeviceTeam: GPU " + std::to_string(a) + " cannot access GPU " + std::to_string(b) +
                  "'s memory (no peer access), so their replicas cannot reduce in each other's memory; use NCCL "
                  "(one replica per GPU) or the host-staged path (strata::choose_gpu_reduce says which applies)");
    {
      cuda::DeviceGuard g{a};
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cuda::detail::ignore(e);
      else cuda::check(e, "cudaDeviceEnablePeerAccess");
    }
    // Peer access covers cudaMalloc memory, not the stream-ordered pool's,
    // where replicas' buffers live: GPU a must be given access to b's pool.
    cuda::grant_pool_access(a, b);
  }

  std::vector<int> devices_;
  std::vector<int> distinct_;  // each GPU once
  detail::Team team_;
  std::vector<cuda::Event> ready_, done_;
  std::vector<std::unique_ptr<cuda::detail::MessageChannel>> channels_;  // [from * size() + to]
};

}  // namespace strata
