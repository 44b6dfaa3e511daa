#pragma once
//! CudaDeviceOps: the part of kernels::Compute on one GPU that is not
//! arithmetic: the device, its non-blocking stream, memory from the
//! device's stream-ordered pool, pinned staging for upload and download,
//! and CUDA graphs captured from the stream. CudaCompute (cuda/compute.hpp)
//! adds cuBLAS and strata's kernels on top.
//!   class CudaCompute final : public strata::cuda::CudaDeviceOps { ... };

#include <cstdio>
#include <memory>
#include <string>

#include <strata/cuda/device.hpp>
#include <strata/cuda/error.hpp>
#include <strata/cuda/graph.hpp>
#include <strata/cuda/launch.hpp>
#include <strata/cuda/staging.hpp>
#include <strata/cuda/stream.hpp>
#include <strata/kernels/compute.hpp>

namespace strata::cuda {

class CudaDeviceOps : public kernels::Compute {
 public:
  explicit CudaDeviceOps(int device)
      : device_((require_device(device, "CudaCompute"), device)), stream_(device),
        name_("cuda:" + std::to_string(device) + " (" + device_name(device) + ")") {}
  CudaDeviceOps(const CudaDeviceOps&) = delete;
  CudaDeviceOps& operator=(const CudaDeviceOps&) = delete;
  ~CudaDeviceOps() override {
    (void)drain();
    // the stream belongs to device_: destroyed with it current, then the thread's device given back
    // (a stream destroyed with work pending is released once that work ends)
    int previous = device_;
    if (const cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) {
      detail::ignore(e);
      previous = device_;
    }
    if (previous != device_) detail::ignore(cudaSetDevice(device_));
    stream_ = Stream{};
    if (previous != device_) detail::ignore(cudaSetDevice(previous));
  }

  [[nodiscard]] kernels::Where where() const noexcept override { return kernels::Where::Cuda; }
  [[nodiscard]] std::string name() const override { return name_; }
  //! The stream every call of this compute is ordered on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_.get(); }
  [[nodiscard]] int device() const noexcept { return device_; }
  // -- graphs ----------------------------------------------------------------
  //! Starts recording this compute's calls into a graph instead of running them.
  void begin_capture() {
    DeviceGuard g{device_};
    if (capturing()) throw Error(name_ + ": begin_capture while a capture is already open; call end_capture() first");
    check(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  }
  //! Ends the capture begun by begin_capture() and instantiates it.
  [[nodiscard]] Graph end_capture() {
    DeviceGuard g{device_};
    if (!capturing()) throw Error(name_ + ": end_capture without begin_capture()");
    cudaGraph_t graph = nullptr;
    check(cudaStreamEndCapture(stream_.get(), &graph), "cudaStreamEndCapture");
    struct Destroy {
      void operator()(cudaGraph_t p) const noexcept { cuda::detail::ignore(cudaGraphDestroy(p)); }
    };
    std::unique_ptr<CUgraph_st, Destroy> owned(graph);
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch), "cudaGraphInstantiate");
    return Graph(exec, stream_.get());
  }
  //! Whether a capture is open on this compute's stream.
  [[nodiscard]] bool capturing() const {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream_.get(), &st), "cudaStreamIsCapturing");
    return st != cudaStreamCaptureStatusNone;
  }

  // -- memory ----------------------------------------------------------------
  [[nodiscard]] void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    DeviceGuard g{device_};
    void* p = nullptr;
    check_allocation(cudaMallocAsync(&p, bytes, stream_.get()), "cudaMallocAsync", bytes, device_);
    return p;
  }
  void deallocate(void* p, std::size_t /*bytes*/) noexcept override {
    if (!p) return;
    int previous = device_;
    cuda::detail::ignore(cudaGetDevice(&previous));
    if (previous != device_) cuda::detail::ignore(cudaSetDevice(device_));
    cuda::detail::ignore(cudaFreeAsync(p, stream_.get()));
    if (previous != device_) cuda::detail::ignore(cudaSetDevice(previous));
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard g{device_};
    refuse_in_capture("upload");
    stager_.upload(stream_.get(), dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard g{device_};
    refuse_in_capture("download");
    stager_.download(stream_.get(), dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    DeviceGuard g{device_};
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()), "cudaMemcpyAsync(DeviceToDevice)");
  }
  //! `rows` blocks of `width` bytes in one cudaMemcpy2DAsync on the stream
  //! (Concatenate's column blocks: one call, not one copy per row).
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
               std::size_t rows) override {
    if (width == 0 || rows == 0) return;
    if (width > dst_pitch || width > src_pitch)
      throw Error(name_ + ": copy_2d of " + std::to_string(width) + " bytes per row with pitches " +
                  std::to_string(dst_pitch) + " (destination) and " + std::to_string(src_pitch) +
                  " (source): a row cannot be wider than its pitch");
    DeviceGuard g{device_};
    check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, stream_.get()),
          "cudaMemcpy2DAsync(DeviceToDevice)");
  }
  void fill(float* x, float value, std::size_t n) override {
    DeviceGuard g{device_};
    detail::launch_fill(stream_.get(), x, value, n);
  }
  void synchronize() override {
    DeviceGuard g{device_};
    refuse_in_capture("synchronize");
    stream_.synchronize();
  }
  //! Polls the stream (never blocking in CUDA) until its work ends or `timeout` passes.
  bool synchronize_within(std::chrono::milliseconds timeout) override {
    DeviceGuard g{device_};
    return detail::wait_bounded([&] { return cudaStreamQuery(stream_.get()); }, timeout);
  }
  //! Makes this compute's device current on the calling thread (the kernel
  //! launches and cuBLAS calls below rely on it; a replica thread calls it
  //! before its step).
  int bind_thread() override {
    int previous = -1;
    if (const cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) {
      detail::ignore(e);
      previous = -1;
    }
    check(cudaSetDevice(device_), "cudaSetDevice");
    return previous;
  }
  void unbind_thread(int previous) noexcept override {
    if (previous >= 0 && previous != device_) detail::ignore(cudaSetDevice(previous));
  }

 protected:
  void refuse_in_capture(const char* call) const {
    if (capturing())
      throw Error(name_ + ": " + call +
                  " cannot be captured into a CUDA graph (it waits on the host, or a replay would copy stale "
                  "staging memory); call it before begin_capture() or after end_capture()");
  }
  //! Ends an abandoned capture (so that the stream can be destroyed) and
  //! waits for the stream, before anything of the device is released:
  //! bounded (detail::teardown_timeout; a destructor may run while an error
  //! unwinds, behind work that never ends). False when the stream's work is
  //! still pending: the caller then leaves its memory allocated, and says so.
  [[nodiscard]] bool drain() noexcept {
    if (!stream_.get()) return true;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    const cudaError_t capturing = cudaStreamIsCapturing(stream_.get(), &st);
    detail::ignore(capturing);
    if (capturing == cudaSuccess && st != cudaStreamCaptureStatusNone) {
      cudaGraph_t g = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(stream_.get(), &g);
      detail::ignore(ended);
      if (ended == cudaSuccess && g) detail::ignore(cudaGraphDestroy(g));
    }
    if (detail::wait_bounded([&] { return cudaStreamQuery(stream_.get()); }, detail::teardown_timeout)) return true;
    std::fprintf(stderr,
                 "strata: %s: its stream's work has not ended %lld ms after the compute was released; its "
                 "memory is left allocated rather than freed under running work\n",
                 name_.c_str(), static_cast<long long>(detail::teardown_timeout.count()));
    return false;
  }

  int device_;
  Stream stream_;
  detail::Stager stager_;
  std::string name_;
};

}  // namespace strata::cuda
