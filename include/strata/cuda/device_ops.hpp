#pragma once
//! CudaDeviceOps: the part of kernels::Compute on one GPU that is not
//! arithmetic: the device, its non-blocking stream, memory from the
//! device's stream-ordered pool, pinned staging for upload and download,
//! and CUDA graphs captured from the stream. CudaCompute (cuda/compute.hpp)
//! adds cuBLAS and strata's kernels on top.
//!   class CudaCompute final : public strata::cuda::CudaDeviceOps { ... };

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
    drain();
    // the stream belongs to device_: destroyed with it current, then the thread's device given back
    int previous = device_;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = device_;
    if (previous != device_) (void)cudaSetDevice(device_);
    stream_ = Stream{};
    if (previous != device_) (void)cudaSetDevice(previous);
    (void)cudaGetLastError();
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
      void operator()(cudaGraph_t p) const noexcept { (void)cudaGraphDestroy(p); }
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
    (void)cudaGetDevice(&previous);
    if (previous != device_) (void)cudaSetDevice(device_);
    (void)cudaFreeAsync(p, stream_.get());
    if (previous != device_) (void)cudaSetDevice(previous);
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
  void fill(float* x, float value, std::size_t n) override {
    DeviceGuard g{device_};
    detail::launch_fill(stream_.get(), x, value, n);
  }
  void synchronize() override {
    DeviceGuard g{device_};
    refuse_in_capture("synchronize");
    stream_.synchronize();
  }
  //! Makes this compute's device current on the calling thread (the kernel
  //! launches and cuBLAS calls below rely on it; a replica thread calls it
  //! before its step).
  int bind_thread() override {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) {
      (void)cudaGetLastError();
      previous = -1;
    }
    check(cudaSetDevice(device_), "cudaSetDevice");
    return previous;
  }
  void unbind_thread(int previous) noexcept override {
    if (previous >= 0 && previous != device_ && cudaSetDevice(previous) != cudaSuccess) (void)cudaGetLastError();
  }

 protected:
  void refuse_in_capture(const char* call) const {
    if (capturing())
      throw Error(name_ + ": " + call +
                  " cannot be captured into a CUDA graph (it waits on the host, or a replay would copy stale "
                  "staging memory); call it before begin_capture() or after end_capture()");
  }
  //! Ends an abandoned capture (so that the stream can be destroyed) and
  //! waits for the stream: before anything of the device is released.
  void drain() noexcept {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_.get(), &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(stream_.get(), &g) == cudaSuccess && g) (void)cudaGraphDestroy(g);
    }
    (void)cudaStreamSynchronize(stream_.get());
    (void)cudaGetLastError();
  }

  int device_;
  Stream stream_;
  detail::Stager stager_;
  std::string name_;
};

}  // namespace strata::cuda
