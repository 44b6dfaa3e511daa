#pragma once
//! One NCCL rank as strata holds it (private to strata/comm/nccl): the
//! non-blocking communicator handle, its GPU, its first failure, and the
//! polling every wait on NCCL goes through. Communicators are created
//! non-blocking (ncclConfig_t::blocking = 0), so no NCCL call ever blocks the
//! host: a call that returns ncclInProgress goes on in the background and is
//! polled (ncclCommGetAsyncError) under a deadline; a failure or a deadline
//! aborts the communicator (ncclCommAbort, which also ends its kernels).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include <strata/cuda/nccl/error.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/core/concepts.hpp>
#include <strata/cuda/stream.hpp>

namespace strata::detail::nccl {

using Clock = std::chrono::steady_clock;

//! NCCL's data type of a strata element type (bf16 and fp16: compression's).
template <WireElement T>
constexpr ncclDataType_t datatype() noexcept {
  if constexpr (std::same_as<T, bf16>) return ncclBfloat16;
  else if constexpr (std::same_as<T, fp16>) return ncclFloat16;
  else if constexpr (std::same_as<T, float>) return ncclFloat32;
  else if constexpr (std::same_as<T, double>) return ncclFloat64;
  else if constexpr (std::same_as<T, std::int32_t>) return ncclInt32;
  else return ncclInt64;
}

//! Element types as they travel in a point-to-point header: an index into
//! these names (strata's dtype_name), NCCL's types and sizes.
inline constexpr std::string_view dtype_names[] = {"float32", "float64", "int32", "int64"};
inline constexpr ncclDataType_t dtype_types[] = {ncclFloat32, ncclFloat64, ncclInt32, ncclInt64};
inline constexpr std::size_t dtype_sizes[] = {4, 8, 4, 8};
template <Element T>
constexpr std::int64_t dtype_code() noexcept {
  for (std::int64_t i = 0; i < 4; ++i)
    if (dtype_names[i] == dtype_name<T>()) return i;
  return 0;
}

//! NCCL's reduction of a strata operation: MEAN is ncclAvg (floating point
//! only, which detail::check_op enforces at compile time).
template <ReduceOperation Op>
constexpr ncclRedOp_t red_op() noexcept {
  if constexpr (std::same_as<Op, SumOp>) return ncclSum;
  else if constexpr (std::same_as<Op, MeanOp>) return ncclAvg;
  else if constexpr (std::same_as<Op, MinOp>) return ncclMin;
  else if constexpr (std::same_as<Op, MaxOp>) return ncclMax;
  else return ncclProd;
}

//! Between two polls: yield at first (NCCL's enqueue takes microseconds),
//! then sleep briefly so that a long wait does not burn a core.
inline void pause(int i) noexcept {
  if (i < 200) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::microseconds(i < 5000 ? 20 : 200));
}

//! Polls `comm` until its state leaves ncclInProgress (the state, or the
//! failing status of ncclCommGetAsyncError itself) or `deadline` passes
//! (ncclInProgress).
inline ncclResult_t poll_state(ncclComm_t comm, Clock::time_point deadline) noexcept {
  for (int i = 0;; ++i) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    pause(i);
  }
}

//! Runs `f` with `device` current (and the previous device restored), or
//! without switching when even that fails: for teardown, which must not throw.
template <class F>
void on_device(int device, F f) noexcept {
  int previous = -1;
  const bool got = cudaGetDevice(&previous) == cudaSuccess;
  if (got && previous != device) cuda::detail::ignore(cudaSetDevice(device));
  f();
  if (got && previous != device) cuda::detail::ignore(cudaSetDevice(previous));
  (void)cudaGetLastError();  // teardown: what f's NCCL calls left (none of it can be reported)
}

//! Throws Error unless `bytes` at `p` are memory of GPU `device` (device or
//! managed memory): NCCL given host memory or another GPU's would fault on
//! the device, which ends the whole CUDA context.
inline void check_device_memory(const void* p, std::size_t bytes, int device, const std::string& who,
                                const char* what) {
  if (bytes == 0) return;
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  std::string wrong;
  if (e != cudaSuccess) {
    cuda::detail::ignore(e);
    wrong = "is not memory CUDA knows (" + std::string(cudaGetErrorName(e)) + ")";
  } else if (a.type == cudaMemoryTypeManaged) {
    return;
  } else if (a.type != cudaMemoryTypeDevice) {
    wrong = "is host memory";
  } else if (a.device != device) {
    wrong = "is memory of GPU " + std::to_string(a.device);
  } else {
    return;
  }
  throw Error(who + ": the " + what + " buffer " + wrong + "; NCCL moves the memory of this communicator's GPU " +
              std::to_string(device) + " only (cudaMalloc on it, or a Tensor<T, CudaSpace> there)");
}

//! One NCCL rank: its communicator, place and GPU, and its first failure.
//! Owned by an NcclTeam (one per GPU) or by a world NcclCommunicator, used
//! by one thread at a time (NCCL forbids concurrent calls on a communicator).
class Rank {
 public:
  Rank(ncclComm_t comm, int rank, int size, int device, std::chrono::milliseconds timeout) noexcept
      : comm_(comm), rank_(rank), size_(size), device_(device), timeout_(timeout) {}
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;
  ~Rank() { finish_close(Clock::now() + timeout_); }

  [[nodiscard]] ncclComm_t comm() const noexcept { return comm_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  //! Empty while usable; the first failure once aborted.
  [[nodiscard]] const std::string& failure() const noexcept { return failure_; }

  //! Records `why` as the failure (the first one stays) and aborts the NCCL
  //! communicator: its kernels still on the GPU stop, its resources go.
  void abort(const std::string& why) noexcept {
    if (failure_.empty()) failure_ = why.empty() ? std::string("aborted") : why;
    if (comm_ == nullptr) return;
    // ncclCommAbort is blocking by design (NCCL runs it synchronously even
    // for a non-blocking communicator); it raises the abort flag first, so
    // kernels waiting for peers end and it returns.
    on_device(device_, [&] { (void)ncclCommAbort(comm_); });
    comm_ = nullptr;
  }

  //! Starts a clean shutdown: ncclCommFinalize, which returns at once on a
  //! non-blocking communicator (the ranks of one team start theirs together).
  void start_close() noexcept {
    if (comm_ == nullptr || closing_) return;
    ncclResult_t r = ncclSuccess;
    on_device(device_, [&] { r = ncclCommFinalize(comm_); });
    if (r != ncclSuccess && r != ncclInProgress) return abort("ncclCommFinalize failed");
    closing_ = true;
  }
  //! Completes it by `deadline`: once finalized, ncclCommDestroy is local;
  //! a finalize that does not complete in time is aborted instead.
  void finish_close(Clock::time_point deadline) noexcept {
    if (comm_ == nullptr) return;
    start_close();
    if (comm_ == nullptr) return;
    if (poll_state(comm_, deadline) != ncclSuccess) return abort("the communicator did not finalize in time");
    on_device(device_, [&] { (void)ncclCommDestroy(comm_); });
    comm_ = nullptr;
  }

 private:
  ncclComm_t comm_;
  int rank_, size_, device_;
  std::chrono::milliseconds timeout_;
  std::string failure_;
  bool closing_ = false;
};

}  // namespace strata::detail::nccl
