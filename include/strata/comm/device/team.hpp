#pragma once
//! BasicDeviceTeam<R>: the shared state of device replicas in one process
//! whose memories reach each other (several replicas on one GPU, GPUs with
//! peer access, or stand-in GPUs), over a device runtime R: CUDA's
//! (cuda/comm/runtime.hpp; strata::DeviceTeam) or the host stand-in's
//! (comm/device/host_runtime.hpp), so CI runs the team logic a GPU runs.
//! The host side of every collective is the CPU team's (comm/threads/team.hpp:
//! agreement, deadlines, errors naming the replicas); the device side is
//! ordered by two events per replica, "ready" and "done", which the other
//! replicas' streams wait for: the host never waits for the device.
//!   strata::BasicDeviceTeam<strata::detail::HostRuntime> team{{0, 0, 0}};   // 3 stand-in replicas
//!   auto comm = team.communicator(r, stream);                         // on replica thread r
//!   comm.all_reduce(std::span<float>(grad, n), strata::Sum);

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <strata/comm/device/message_buffers.hpp>
#include <strata/comm/device/replica_buffers.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/comm/threads/team.hpp>
#include <strata/core/error.hpp>

namespace strata {

template <class R>
class BasicDeviceCommunicator;

//! p device replicas of one process and their collectives' shared state.
//! Built once (enables peer access between the distinct devices it names);
//! each replica thread takes its communicator with communicator(r, stream).
template <class R>
class BasicDeviceTeam {
 public:
  //! Replica r computes on device `devices[r]`.
  explicit BasicDeviceTeam(std::vector<int> devices, CommOptions opts = {})
      : devices_(checked(std::move(devices))), team_(static_cast<int>(devices_.size()), opts) {
    std::set<int> distinct(devices_.begin(), devices_.end());
    for (int d : distinct) R::require_device(d, "DeviceTeam");
    for (int a : distinct)
      for (int b : distinct)
        if (a != b) R::enable_peer(a, b);
    for (int d : devices_) {
      typename R::Guard g{d};
      ready_.emplace_back();
      done_.emplace_back();
    }
    for (int from : devices_)
      for (int to : devices_) channels_.push_back(std::make_unique<detail::MessageChannel<R>>(from, to));
  }
  BasicDeviceTeam(const BasicDeviceTeam&) = delete;
  BasicDeviceTeam& operator=(const BasicDeviceTeam&) = delete;

  [[nodiscard]] int size() const noexcept { return static_cast<int>(devices_.size()); }
  //! The device of each replica.
  [[nodiscard]] const std::vector<int>& devices() const noexcept { return devices_; }
  [[nodiscard]] const CommOptions& options() const noexcept { return team_.options(); }

  //! Replica `rank`'s communicator: its calls are enqueued on `stream`, a
  //! stream of the replica's device (an Error otherwise).
  BasicDeviceCommunicator<R> communicator(int rank, typename R::Stream stream) {
    return BasicDeviceCommunicator<R>{*this, rank, stream};
  }

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
  //! passed, never a device-wide synchronize (which would also wait for work
  //! outside the team, such as an NCCL sum whose peer is gone). Returns ""
  //! when everything ended, else what is still pending, for the error being
  //! reported ("replica 1 (GPU 0): its part of the last collective has not
  //! ended after 120000 ms"). Its own errors are not reported: the failure
  //! being reported is the one that counts.
  //!   if (std::string pending = team.quiesce(); !pending.empty()) why += "; " + pending;
  [[nodiscard]] std::string quiesce() const noexcept {
    try {
      const auto deadline = std::chrono::steady_clock::now() + options().timeout;
      std::string pending;
      for (int r = 0; r < size(); ++r) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero()));
        if (R::wait_bounded(done(r), left)) continue;
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

  // For BasicDeviceCommunicator.
  detail::Team& host_team() noexcept { return team_; }
  [[nodiscard]] const typename R::Event& ready(int r) const noexcept { return ready_[static_cast<std::size_t>(r)]; }
  [[nodiscard]] const typename R::Event& done(int r) const noexcept { return done_[static_cast<std::size_t>(r)]; }
  typename R::Event& ready(int r) noexcept { return ready_[static_cast<std::size_t>(r)]; }
  typename R::Event& done(int r) noexcept { return done_[static_cast<std::size_t>(r)]; }
  //! The message buffers from replica `from` to replica `to` (send / recv).
  detail::MessageChannel<R>& channel(int from, int to) noexcept {
    return *channels_[static_cast<std::size_t>(from * size() + to)];
  }
  //! How many message buffers the team holds (they are reused from step to step).
  [[nodiscard]] std::size_t message_buffers() const {
    std::size_t n = 0;
    for (const auto& c : channels_) n += c->buffers();
    return n;
  }

 private:
  static std::vector<int> checked(std::vector<int> devices) {
    if (devices.empty())
      throw Error("DeviceTeam: no replicas (name GPUs: strata::virtual_gpus(0, 4), strata::gpus({0, 1}))");
    if (devices.size() > static_cast<std::size_t>(detail::max_device_replicas))
      throw Error("DeviceTeam: " + std::to_string(devices.size()) + " replicas; a device team holds at most " +
                  std::to_string(detail::max_device_replicas));
    for (std::size_t r = 0; r < devices.size(); ++r)
      if (devices[r] < 0)
        throw Error("DeviceTeam: replica " + std::to_string(r) + " names device " + std::to_string(devices[r]) +
                    "; a device index is 0 or more");
    return devices;
  }

  std::vector<int> devices_;
  detail::Team team_;
  std::vector<typename R::Event> ready_, done_;
  std::vector<std::unique_ptr<detail::MessageChannel<R>>> channels_;  // [from * size() + to]
};

}  // namespace strata
