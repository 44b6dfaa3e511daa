#pragma once
//! The device buffers that carry DeviceCommunicator's send / recv messages
//! from one replica to another, kept by the DeviceTeam and reused from step
//! to step: no allocation, free or host wait inside a step once the first
//! steps made them. Each buffer orders its reuse on the device with two
//! events: the sender's stream waits for `released` (the receiver copied the
//! previous message out) before it copies in and records `copied`; the
//! receiver's stream waits for `copied` before it copies out and records
//! `released`.
//!   auto* b = team.channel(me, peer).take(bytes);   // sender
//!   b->released.wait(stream);  cudaMemcpyAsync(b->data, src, bytes, ...);  b->copied.record(stream);
//!   b->copied.wait(stream);  cudaMemcpyAsync(dst, b->data, ...);  b->released.record(stream);   // receiver
//!   team.channel(me, peer).give_back(b);

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include <strata/cuda/error.hpp>
#include <strata/cuda/stream.hpp>

namespace strata::cuda::detail {

//! One message buffer: device memory of the sender's GPU (cudaMalloc, which
//! peer access covers), `copied` an event of the sender's GPU, `released`
//! one of the receiver's.
struct MessageBuffer {
  MessageBuffer(int from, int to, std::size_t bytes)
      : copied(event_on(from)), released(event_on(to)), device(from), capacity(bytes) {
    DeviceGuard g{from};
    check_allocation(cudaMalloc(&data, bytes), "cudaMalloc (message buffer)", bytes, from);
  }
  MessageBuffer(const MessageBuffer&) = delete;
  MessageBuffer& operator=(const MessageBuffer&) = delete;
  ~MessageBuffer() {  // the team ends: cudaFree waits for the device
    int previous = -1;
    const bool got = cudaGetDevice(&previous) == cudaSuccess;
    if (got && previous != device) cuda::detail::ignore(cudaSetDevice(device));
    cuda::detail::ignore(cudaFree(data));
    if (got && previous != device) cuda::detail::ignore(cudaSetDevice(previous));
  }

  Event copied, released;
  int device;
  std::size_t capacity;
  void* data = nullptr;

 private:
  static Event event_on(int device) {
    DeviceGuard g{device};
    return Event{};
  }
};

//! The message buffers from one replica's GPU to another's: free ones are
//! reused; a send finding none big enough makes one (rounded up to a power
//! of two, at least 4 KiB), kept until the team ends. Thread-safe.
class MessageChannel {
 public:
  MessageChannel(int from, int to) : from_(from), to_(to) {}

  //! A free buffer of at least `bytes` (the smallest such), made if none.
  MessageBuffer* take(std::size_t bytes) {
    std::lock_guard lk(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if ((*it)->capacity >= bytes && (best == free_.end() || (*it)->capacity < (*best)->capacity)) best = it;
    if (best != free_.end()) {
      MessageBuffer* b = *best;
      free_.erase(best);
      return b;
    }
    std::size_t cap = std::size_t{4} << 10;
    while (cap < bytes) cap *= 2;
    all_.push_back(std::make_unique<MessageBuffer>(from_, to_, cap));
    return all_.back().get();
  }
  //! `b` (taken from this channel) may carry the next message.
  void give_back(MessageBuffer* b) {
    std::lock_guard lk(mu_);
    free_.push_back(b);
  }
  //! How many buffers it holds.
  [[nodiscard]] std::size_t buffers() const {
    std::lock_guard lk(mu_);
    return all_.size();
  }

 private:
  int from_, to_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<MessageBuffer>> all_;  // guarded by mu_
  std::vector<MessageBuffer*> free_;                 // guarded by mu_
};

}  // namespace strata::cuda::detail
