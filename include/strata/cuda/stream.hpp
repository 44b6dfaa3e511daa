#pragma once
//! RAII handles for CUDA streams and events, and a guard for the current
//! device. Each names its device: CUDA objects belong to the device that was
//! current when they were made, so the constructors set it for the call.
//!   strata::cuda::Stream s{0};                  // a non-blocking stream on device 0
//!   strata::cuda::Event e;  e.record(s.get());  e.synchronize();

#include <utility>

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
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
};

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
    if (s_) (void)cudaStreamDestroy(s_);
  }

  [[nodiscard]] cudaStream_t get() const noexcept { return s_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  //! Returns when every call issued on the stream has finished.
  void synchronize() const { check(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

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
    if (e_) (void)cudaEventDestroy(e_);
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
      (void)cudaGetLastError();
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
