#pragma once
//! Memory: the device-runtime half of a Compute (kernels/compute.hpp) —
//! where a replica's buffers live and how the host reaches them:
//! allocation, copies to, from and within the space, fill, waiting for
//! issued work, binding a thread, and the finiteness count the executors
//! decide a step with. A second GPU backend (ROCm) implements it with the
//! Compute; the host's, HostMemory (kernels/host/memory.hpp), needs no
//! BLAS, so executors hold CPU replicas' variables through it.
//!   strata::kernels::Memory& m = strata::kernels::host_memory();
//!   strata::kernels::Buffer<float> w{m, strata::Shape{n}};  m.fill(w.data(), 0.f, n);

#include <chrono>
#include <cstddef>
#include <string>

namespace strata::kernels {

//! Which kind of memory a Compute's pointers address. StandIn: the host's
//! memory, handled as a device's (kernels/host/device_stand_in.hpp: a GPU's
//! stand-in on a machine without one, so that every branch for a device
//! runs there): code must reach it through upload and download, as a GPU's.
enum class Where { Host, Cuda, StandIn };

class Memory {
 public:
  virtual ~Memory() = default;
  [[nodiscard]] virtual Where where() const noexcept = 0;
  //! "host", "cuda:0 (NVIDIA H100 80GB HBM3)": for messages.
  [[nodiscard]] virtual std::string name() const = 0;

  //! `bytes` of this space's memory (aligned for any element; null for 0).
  [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  //! dst (this space) <- host src; `src` may be reused when this returns.
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  //! host dst <- src (this space); the bytes are on the host when this returns.
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  //! `rows` blocks of `width` bytes within this space: block r from src + r
  //! * src_pitch to dst + r * dst_pitch (a column block of a row-major matrix:
  //! Concatenate's). By default one copy per row; a GPU does it in one call.
  virtual void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                       std::size_t rows) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    for (std::size_t r = 0; r < rows; ++r) copy(d + r * dst_pitch, s + r * src_pitch, width);
  }
  virtual void fill(float* x, float value, std::size_t n) = 0;
  //! Returns when every call issued before it has finished (a no-op on the host).
  virtual void synchronize() = 0;
  //! As synchronize(), but gives up after `timeout`, for failure paths (work
  //! queued behind a collective that never ends must not hold the caller):
  //! true when every call issued before it has finished, false when some is
  //! still pending. Errors of that work are dropped (the failure being
  //! reported is the one that counts). The host's: at once.
  virtual bool synchronize_within(std::chrono::milliseconds /*timeout*/) {
    try {
      synchronize();
    } catch (...) {
    }
    return true;
  }
  //! Makes the calling thread ready to issue this space's calls (a GPU:
  //! its device current), for the thread that will run a replica's step; a
  //! no-op on the host. Returns what unbind_thread restores (a GPU: the
  //! device current before).
  virtual int bind_thread() { return -1; }
  //! Gives the calling thread back its state from before the bind_thread()
  //! that returned `previous` (for a caller's thread lent for a pass).
  virtual void unbind_thread(int /*previous*/) noexcept {}
  //! *acc (a double in this space) += how many of x[0, n) are NaN or
  //! infinite: the gradient finiteness check, stream-ordered like the loss
  //! sums so that a GPU reports it with them (no extra synchronization).
  virtual void count_nonfinite(const float* x, std::size_t n, double* acc) = 0;
};

}  // namespace strata::kernels
