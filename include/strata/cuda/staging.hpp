#pragma once
//! Host <-> device copies through pinned staging buffers (private to
//! strata/cuda and CudaSpace). Two buffers alternate, each with an event
//! that says when the copy reading or filling it has finished, so that
//! large copies are cut into chunks whose host memcpy overlaps the DMA of
//! the previous chunk, and no buffer is overwritten while a copy from it is
//! in flight. Buffers grow on demand up to `chunk_bytes`. Callers make the
//! stream's device current (the events are made on first use). Its host
//! waits are bounded where a communicator watches the stream (NCCL:
//! detail::host_wait), so a dead peer cannot hold a download forever.
//!   strata::cuda::detail::Stager st;
//!   st.upload(stream, dev, host, n);   // host may be reused on return
//!   st.download(stream, host, dev, n); // bytes on the host on return

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>

#include <strata/cuda/error.hpp>
#include <strata/cuda/stream.hpp>

namespace strata::cuda::detail {

class Stager {
 public:
  //! The largest piece one copy moves through a staging buffer.
  static constexpr std::size_t chunk_bytes = std::size_t{8} << 20;

  Stager() = default;
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;
  ~Stager() {
    for (Slot& s : slots_) {
      // bounded (a destructor may run while an error unwinds): a copy that has not ended keeps its buffer
      if (s.pending && !wait_bounded([&] { return cudaEventQuery(s.done->get()); }, teardown_timeout)) continue;
      if (s.host) ignore(cudaFreeHost(s.host));
    }
  }

  //! dst (device) <- src (host), stream-ordered on `stream`. Returns once
  //! `src` has been read; the device copy may still be in flight.
  void upload(cudaStream_t stream, void* dst, const void* src, std::size_t bytes) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    for (std::size_t off = 0; off < bytes; off += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, bytes - off);
      Slot& slot = slots_[next_];
      next_ ^= 1;
      reserve(slot, n);  // waits for the copy still reading this buffer
      std::memcpy(slot.host, s + off, n);
      check(cudaMemcpyAsync(d + off, slot.host, n, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync(HostToDevice)");
      slot.done->record(stream);
      slot.pending = true;
      slot.stream = stream;
    }
  }

  //! dst (host) <- src (device) after the work already issued on `stream`;
  //! the bytes are in `dst` when this returns.
  void download(cudaStream_t stream, void* dst, const void* src, std::size_t bytes) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    const std::size_t chunks = (bytes + chunk_bytes - 1) / chunk_bytes;
    auto issue = [&](std::size_t i) {
      const std::size_t off = i * chunk_bytes, n = std::min(chunk_bytes, bytes - off);
      Slot& slot = slots_[i % 2];
      reserve(slot, n);
      check(cudaMemcpyAsync(slot.host, s + off, n, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync(DeviceToHost)");
      slot.done->record(stream);
      slot.pending = true;
      slot.stream = stream;
    };
    if (chunks) issue(0);
    for (std::size_t i = 0; i < chunks; ++i) {
      if (i + 1 < chunks) issue(i + 1);  // the next chunk's DMA overlaps this chunk's memcpy
      Slot& slot = slots_[i % 2];
      host_wait(slot.done->get(), stream, "cudaEventSynchronize (staging download)");
      slot.pending = false;
      const std::size_t off = i * chunk_bytes;
      std::memcpy(d + off, slot.host, std::min(chunk_bytes, bytes - off));
    }
  }

 private:
  struct Slot {
    void* host = nullptr;
    std::size_t capacity = 0;
    std::optional<Event> done;  // made at first use, on the device current then (the stream's)
    bool pending = false;
    cudaStream_t stream = nullptr;  // where `done` was last recorded
  };

  //! Makes `slot` free (its last copy finished) and at least `n` bytes.
  static void reserve(Slot& slot, std::size_t n) {
    if (!slot.done) slot.done.emplace();
    if (slot.pending) {
      host_wait(slot.done->get(), slot.stream, "cudaEventSynchronize (staging buffer)");
      slot.pending = false;
    }
    if (slot.capacity >= n) return;
    std::size_t cap = std::size_t{64} << 10;
    while (cap < n) cap *= 2;
    cap = std::min(cap, chunk_bytes);
    if (slot.host) check(cudaFreeHost(slot.host), "cudaFreeHost");
    slot.host = nullptr;
    slot.capacity = 0;
    check_allocation(cudaMallocHost(&slot.host, cap), "cudaMallocHost (pinned staging buffer)", cap, -1);
    slot.capacity = cap;
  }

  Slot slots_[2];
  int next_ = 0;
};

}  // namespace strata::cuda::detail
