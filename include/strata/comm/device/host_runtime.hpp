#pragma once
//! The host as a device runtime for the device team (team.hpp,
//! communicator.hpp): what stand-in GPUs (kernels::DeviceStandIn, in host
//! memory) sum their gradients with, so that CI runs the device team's
//! logic a GPU runs (agreement, shards, the reduce's buffers, copies,
//! message buffers, events, side streams) on machines without a GPU.
//! A stand-in stream runs its work when it is queued, on the queuing
//! thread, so an event is complete once recorded and a stream's wait on it
//! has nothing left to wait for; the reduce is the host's (reduce_range,
//! bitwise the CUDA kernel's: each element combined in replica order).
//!   strata::BasicDeviceTeam<strata::detail::HostRuntime> team{{0, 0, 0}};
//!   auto comm = team.communicator(r, strata::detail::HostStream{0});
//!   comm.all_reduce(std::span<float>(grad, n), strata::Sum);

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <type_traits>

#include <strata/comm/device/replica_buffers.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/core/half.hpp>

namespace strata::detail {

//! A stand-in GPU's stream: the device it belongs to (its work runs when queued).
struct HostStream {
  int device = -1;
  friend bool operator==(HostStream, HostStream) = default;
};

struct HostRuntime {
  using Stream = HostStream;

  //! A point in a stand-in stream: its work already ran when it is recorded.
  class Event {
   public:
    void record(Stream) noexcept { ++records_; }
    void wait(Stream) const noexcept {}
    [[nodiscard]] bool query() const noexcept { return true; }
    //! How often it was recorded (tests count the team's events with it).
    [[nodiscard]] std::size_t records() const noexcept { return records_; }

   private:
    std::size_t records_ = 0;
  };
  //! A stream of its own on stand-in GPU `device` (a side stream).
  class OwnedStream {
   public:
    explicit OwnedStream(int device) : s_{device} {}
    [[nodiscard]] Stream get() const noexcept { return s_; }

   private:
    Stream s_;
  };
  //! Host memory is every stand-in's: no device to make current.
  struct Guard {
    explicit Guard(int) noexcept {}
  };

  static void require_device(int, const char*) noexcept {}
  static void enable_peer(int, int) noexcept {}  // host memory reaches every stand-in's
  static int device_of(Stream s) noexcept { return s.device; }

  static void copy(void* dst, const void* src, std::size_t bytes, Stream, const char*) noexcept {
    if (bytes) std::memmove(dst, src, bytes);
  }

  //! Elements [0, n) of b's inputs reduced in replica order into each of its outputs (the kernel's contract).
  template <class T>
  static void reduce(Stream, OpKind op, const ReplicaBuffers<T>& b, std::size_t n, std::size_t contributors) {
    if (n == 0) return;
    if constexpr (Half16<T>) {
      if (op == OpKind::sum) return reduce_range<SumOp>(b.in, to(b.p), b.out, to(b.nout), 0, n, contributors);
    } else {
      switch (op) {
        case OpKind::sum: return reduce_range<SumOp>(b.in, to(b.p), b.out, to(b.nout), 0, n, contributors);
        case OpKind::mean:
          if constexpr (std::is_floating_point_v<T>)
            return reduce_range<MeanOp>(b.in, to(b.p), b.out, to(b.nout), 0, n, contributors);
          break;
        case OpKind::min: return reduce_range<MinOp>(b.in, to(b.p), b.out, to(b.nout), 0, n, contributors);
        case OpKind::max: return reduce_range<MaxOp>(b.in, to(b.p), b.out, to(b.nout), 0, n, contributors);
        case OpKind::product: return reduce_range<ProductOp>(b.in, to(b.p), b.out, to(b.nout), 0, n, contributors);
      }
    }
    throw Error("HostRuntime::reduce: operation " + std::string(op_name(op)) + " is not defined for this element type");
  }

  //! Any host pointer is a stand-in's memory: nothing to refuse.
  static void check_memory(const void*, int, const std::string&) noexcept {}

  static void* allocate_message(int, std::size_t bytes) { return ::operator new(bytes, std::align_val_t{64}); }
  static void free_message(int, void* p) noexcept { ::operator delete(p, std::align_val_t{64}); }

  //! The work already ran when it was queued: a completed Work.
  static Work completion(int, Stream, std::string, std::string, std::chrono::milliseconds,
                         std::function<void(const std::string&)>) noexcept {
    return Work{};
  }
  static bool wait_bounded(const Event& e, std::chrono::milliseconds) noexcept { return e.query(); }

 private:
  static std::size_t to(int k) noexcept { return static_cast<std::size_t>(k); }
};

}  // namespace strata::detail
