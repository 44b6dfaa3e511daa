#pragma once
//! RAII handles for CUDA streams and events, and a guard for the current
//! device. Each names its device: CUDA objects belong to the device that was
//! current when they were made, so the constructors set it for the call.
//!   strata::cuda::Stream s{0};                  // a non-blocking stream on device 0
//!   strata::cuda::Event e;  e.record(s.get());  e.synchronize();
//!
//! Host waits on a stream (Stream::synchronize, detail::host_wait) are
//! bounded where a communicator whose peers can hold the stream (NCCL)
//! watches it (detail::watch_stream): they poll instead of blocking, ask the
//! watch for failures elsewhere, and past its deadline let it abort and
//! throw its typed error (CollectiveTimeout naming what is missing).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/cuda/device.hpp>
#include <strata/cuda/error.hpp>

namespace strata::cuda {

//! Makes `device` current for its scope and restores the previous one.
//!   { strata::cuda::DeviceGuard g{1};  cudaMalloc(&p, n); }   // on device 1
//!   // the previous device is current again here
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (device != previous_) {
      require_device(device, "DeviceGuard");
      check(cudaSetDevice(device), "cudaSetDevice");
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cuda::detail::ignore(cudaSetDevice(previous_));
  }

 private:
  int previous_ = 0;
};

namespace detail {

//! What a host wait on a watched stream polls while it waits: a
//! communicator that enqueues work there whose completion depends on peers.
class HostWaitWatch {
 public:
  virtual ~HostWaitWatch() = default;
  //! How long one host wait may take.
  [[nodiscard]] virtual std::chrono::milliseconds timeout() const noexcept = 0;
  //! Throws the typed error when the work cannot complete (a peer failed,
  //! an asynchronous error): called between polls.
  virtual void check(const std::string& what) = 0;
  //! The wait `what` took longer than timeout(): aborts the communicator
  //! (its work on the stream ends) and throws CollectiveTimeout naming it.
  [[noreturn]] virtual void expire(const std::string& what) = 0;
};

struct StreamWatches {
  std::mutex mu;
  std::vector<std::pair<cudaStream_t, HostWaitWatch*>> list;  // guarded by mu
  std::atomic<int> count{0};                                  // list.size(), read without mu
};
inline StreamWatches& stream_watches() {
  static StreamWatches w;
  return w;
}

//! `w` watches `stream` until unwatch_stream (one stream may have several).
inline void watch_stream(cudaStream_t stream, HostWaitWatch* w) {
  auto& s = stream_watches();
  std::lock_guard lk(s.mu);
  s.list.emplace_back(stream, w);
  s.count.store(static_cast<int>(s.list.size()), std::memory_order_release);
}
inline void unwatch_stream(cudaStream_t stream, HostWaitWatch* w) noexcept {
  auto& s = stream_watches();
  std::lock_guard lk(s.mu);
  std::erase(s.list, std::pair<cudaStream_t, HostWaitWatch*>{stream, w});
  s.count.store(static_cast<int>(s.list.size()), std::memory_order_release);
}
inline std::vector<HostWaitWatch*> watches_of(cudaStream_t stream) {
  std::vector<HostWaitWatch*> v;
  auto& s = stream_watches();
  if (s.count.load(std::memory_order_acquire) == 0) return v;
  std::lock_guard lk(s.mu);
  for (const auto& [st, w] : s.list)
    if (st == stream) v.push_back(w);
  return v;
}

//! Between two polls: yield at first, then sleep briefly.
inline void poll_pause(int i) noexcept {
  if (i < 200) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::microseconds(i < 5000 ? 20 : 200));
}

//! The one bounded host wait on GPU work: polls `query` (cudaEventQuery or
//! cudaStreamQuery) until it says done, asking each watch between polls;
//! past the shortest watch timeout, the first watch expires (throws). A CUDA
//! error is CudaError naming `call`.
template <class Query>
void poll_until_done(Query query, const std::vector<HostWaitWatch*>& watches, const std::string& what,
                     const char* call) {
  auto timeout = std::chrono::milliseconds::max();
  for (const HostWaitWatch* w : watches) timeout = std::min(timeout, w->timeout());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    const cudaError_t q = query();
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) check(q, call);
    consume_error(q);  // cudaErrorNotReady is no error; another call's error is left for its check
    for (HostWaitWatch* w : watches) w->check(what);
    if (!watches.empty() && std::chrono::steady_clock::now() - start >= timeout) watches.front()->expire(what);
    poll_pause(i);
  }
}

//! How long a wait on a teardown or failure path (a destructor, the cleanup
//! after an error) polls before it gives up: what it guarded is then left
//! allocated rather than freed under work that may still run.
inline constexpr std::chrono::milliseconds teardown_timeout{std::chrono::minutes(2)};

//! Polls `query` (cudaEventQuery, cudaStreamQuery) until it is not
//! cudaErrorNotReady or `timeout` has passed, never blocking in CUDA: true
//! when the work ended (a failure ends it too; its status is consumed, for
//! the error being reported), false when it is still pending.
//!   if (!wait_bounded([&] { return cudaStreamQuery(s); }, teardown_timeout)) leak_instead_of_free();
template <class Query>
bool wait_bounded(Query query, std::chrono::milliseconds timeout) noexcept {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int i = 0;; ++i) {
    const cudaError_t q = query();
    if (q != cudaErrorNotReady) {
      ignore(q);
      return true;
    }
    ignore(q);
    if (std::chrono::steady_clock::now() >= deadline) return false;
    poll_pause(i);
  }
}

//! The host waits for `event` (recorded on `stream`): cudaEventSynchronize,
//! or bounded polling where the stream is watched.
inline void host_wait(cudaEvent_t event, cudaStream_t stream, const char* call) {
  const auto watches = watches_of(stream);
  if (watches.empty()) return check(cudaEventSynchronize(event), call);
  poll_until_done([&] { return cudaEventQuery(event); }, watches, std::string("a host wait (") + call + ")", call);
}

}  // namespace detail

//! A non-blocking stream on one device (no implicit ordering with the legacy
//! default stream). Move-only; destroyed streams let their work finish.
//!   strata::cuda::Stream s{0};
//!   my_kernel<<<g, b, 0, s.get()>>>(...);  s.synchronize();
class Stream {
 public:
  //! No stream (what a moved-from or released Stream holds).
  Stream() noexcept = default;
  explicit Stream(int device) : device_(device) {
    DeviceGuard g{device};
    check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)), device_(o.device_) {}
  Stream& operator=(Stream&& o) noexcept {
    std::swap(s_, o.s_);
    std::swap(device_, o.device_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_) cuda::detail::ignore(cudaStreamDestroy(s_));
  }

  [[nodiscard]] cudaStream_t get() const noexcept { return s_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  //! Returns when every call issued on the stream has finished; bounded
  //! where a communicator watches the stream (see the top of this header).
  void synchronize() const {
    const auto watches = detail::watches_of(s_);
    if (watches.empty()) return check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
    detail::poll_until_done([&] { return cudaStreamQuery(s_); }, watches, "a host wait (cudaStreamSynchronize)",
                            "cudaStreamSynchronize");
  }

 private:
  cudaStream_t s_ = nullptr;
  int device_ = 0;
};

//! A CUDA event: a point in a stream that the host or other streams can
//! wait for. With `timing`, two events give the time between them.
//!   strata::cuda::Event a{true}, b{true};  a.record(s);  work(s);  b.record(s);
//!   float ms = b.elapsed_ms(a);   // waits for b
class Event {
 public:
  explicit Event(bool timing = false) {
    check(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
  }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (e_) cuda::detail::ignore(cudaEventDestroy(e_));
  }

  [[nodiscard]] cudaEvent_t get() const noexcept { return e_; }
  //! Marks the current end of `stream`'s work.
  void record(cudaStream_t stream) { check(cudaEventRecord(e_, stream), "cudaEventRecord"); }
  //! Makes `stream` wait (on the device) for the recorded work; the host does not wait.
  void wait(cudaStream_t stream) const { check(cudaStreamWaitEvent(stream, e_, 0), "cudaStreamWaitEvent"); }
  //! The host waits for the recorded work.
  void synchronize() const { check(cudaEventSynchronize(e_), "cudaEventSynchronize"); }
  //! Whether the recorded work has finished (true for an event never recorded).
  [[nodiscard]] bool query() const {
    const cudaError_t r = cudaEventQuery(e_);
    if (r == cudaErrorNotReady) {
      detail::consume_error(r);
      return false;
    }
    check(r, "cudaEventQuery");
    return true;
  }
  //! Milliseconds from `start` to this event (both timing events); waits for this one.
  [[nodiscard]] float elapsed_ms(const Event& start) const {
    synchronize();
    float ms = 0.f;
    check(cudaEventElapsedTime(&ms, start.e_, e_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace strata::cuda
