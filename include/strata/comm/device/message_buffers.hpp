#pragma once
//! The buffers that carry a device team's send / recv messages from one
//! replica to another (comm/device/communicator.hpp), kept by the team and
//! reused from step to step: no allocation, free or host wait inside a step
//! once the first steps made them. Each buffer orders its reuse on the
//! device with two events of the runtime R (a device runtime: CUDA's,
//! cuda/comm/runtime.hpp, or the host stand-in's, comm/device/host_runtime.hpp):
//! the sender's stream waits for `released` (the receiver copied the
//! previous message out) before it copies in and records `copied`; the
//! receiver's stream waits for `copied` before it copies out and records `released`.
//!   auto* b = team.channel(me, peer).take(bytes);   // sender
//!   b->released.wait(stream);  R::copy(b->data, src, bytes, stream, "send");  b->copied.record(stream);
//!   team.channel(me, peer).give_back(b);             // receiver, after its copy out

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace strata::detail {

//! One message buffer: memory of the sender's device (R::allocate_message),
//! `copied` an event of the sender's device, `released` one of the receiver's.
template <class R>
struct MessageBuffer {
  MessageBuffer(int from, int to, std::size_t bytes)
      : copied(event_on(from)), released(event_on(to)), device(from), capacity(bytes),
        data(R::allocate_message(from, bytes)) {}
  MessageBuffer(const MessageBuffer&) = delete;
  MessageBuffer& operator=(const MessageBuffer&) = delete;
  ~MessageBuffer() { R::free_message(device, data); }  // the team ends

  typename R::Event copied, released;
  int device;
  std::size_t capacity;
  void* data;

 private:
  static typename R::Event event_on(int device) {
    typename R::Guard g{device};
    return typename R::Event{};
  }
};

//! The message buffers from one replica's device to another's: free ones
//! are reused; a send finding none big enough makes one (rounded up to a
//! power of two, at least 4 KiB), kept until the team ends. Thread-safe.
template <class R>
class MessageChannel {
 public:
  MessageChannel(int from, int to) : from_(from), to_(to) {}

  //! A free buffer of at least `bytes` (the smallest such), made if none.
  MessageBuffer<R>* take(std::size_t bytes) {
    std::lock_guard lk(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if ((*it)->capacity >= bytes && (best == free_.end() || (*it)->capacity < (*best)->capacity)) best = it;
    if (best != free_.end()) {
      MessageBuffer<R>* b = *best;
      free_.erase(best);
      return b;
    }
    std::size_t cap = std::size_t{4} << 10;
    while (cap < bytes) cap *= 2;
    all_.push_back(std::make_unique<MessageBuffer<R>>(from_, to_, cap));
    return all_.back().get();
  }
  //! `b` (taken from this channel) may carry the next message.
  void give_back(MessageBuffer<R>* b) {
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
  std::vector<std::unique_ptr<MessageBuffer<R>>> all_;  // guarded by mu_
  std::vector<MessageBuffer<R>*> free_;                 // guarded by mu_
};

}  // namespace strata::detail
