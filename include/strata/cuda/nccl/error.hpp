#pragma once
//! Typed NCCL errors and the one place every NCCL status of strata is
//! checked: a failing call throws NcclError naming the call, NCCL's status
//! (its name and description), NCCL's own last message, and the rank and
//! GPU it failed on.
//!   strata::nccl::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
//!   // throws strata::NcclError("strata: NCCL call ncclGetUniqueId failed: ncclSystemError (...)")

#include <strata/core/build_config.hpp>  // <strata/config.hpp>, or defaults in a build by hand

#if !STRATA_HAS_NCCL
#error "strata/comm/nccl needs the NCCL backend: install NCCL (libnccl-dev, or NCCL inside the CUDA toolkit) next to the CUDA backend, configure with -Dnccl=enabled -Dcuda=enabled, and link the target with the strata-nccl dependency (strata_nccl_dep)"
#endif

#include <nccl.h>

#include <string>
#include <utility>

#include <strata/core/error.hpp>

namespace strata {

//! An NCCL call failed (or reported an asynchronous error): `call()` is the
//! NCCL function, `result()` its status, `rank()` and `device()` where it
//! failed (-1 when not known). A collective error: the communicator it came
//! from is aborted and every later call on it throws at once.
//!   try { comm.synchronize(); } catch (const strata::NcclError& e) { e.result(); e.rank(); }
//!   // e.what(): "strata: NCCL call ncclAllReduce failed on rank 1 (GPU 1): ncclRemoteError (...)"
class NcclError : public CollectiveError {
 public:
  NcclError(std::string call, ncclResult_t result, int rank, int device, const std::string& what)
      : CollectiveError(what), call_(std::move(call)), result_(result), rank_(rank), device_(device) {}
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  [[nodiscard]] ncclResult_t result() const noexcept { return result_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  std::string call_;
  ncclResult_t result_;
  int rank_, device_;
};

namespace nccl {

//! The enumerator's name of an NCCL status ("ncclRemoteError").
//!   strata::nccl::result_name(ncclInProgress);   // "ncclInProgress"
inline const char* result_name(ncclResult_t r) noexcept {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult_t(?)";
  }
}

//! The NcclError for status `r` of `call` on `rank` / `device` (-1: not
//! known), with `context` (what strata was doing) and NCCL's last message.
//! Built before the communicator is aborted, which may replace that message.
//!   throw strata::nccl::error(r, "ncclAllReduce", 1, 1, "collective #3 all_reduce(sum, float32, 10 elements)");
inline NcclError error(ncclResult_t r, const char* call, int rank = -1, int device = -1,
                       const std::string& context = {}) {
  std::string what = std::string("strata: NCCL call ") + call + " failed";
  if (rank >= 0) what += " on rank " + std::to_string(rank);
  if (device >= 0) what += (rank >= 0 ? " (GPU " : " on GPU ") + std::to_string(device) + (rank >= 0 ? ")" : "");
  if (!context.empty()) what += " in " + context;
  what += std::string(": ") + result_name(r) + " (" + ncclGetErrorString(r) + ")";
  // The comm argument is unused by NCCL: the text is the process's last error.
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') what += "; NCCL's last error: " + std::string(last);
  return NcclError(call, r, rank, device, what);
}

//! Throws NcclError naming `call` unless `r` is ncclSuccess.
//!   strata::nccl::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
//!   strata::nccl::check(ncclCommCount(comm, &n), "ncclCommCount", rank, device);
inline void check(ncclResult_t r, const char* call, int rank = -1, int device = -1, const std::string& context = {}) {
  if (r != ncclSuccess) throw error(r, call, rank, device, context);
}

//! For a call on a non-blocking communicator: true when NCCL goes on in the
//! background (ncclInProgress: poll ncclCommGetAsyncError until the state
//! leaves it), false when it is done; NcclError for any failure.
//!   if (strata::nccl::started(ncclAllReduce(...), "ncclAllReduce")) wait_until_enqueued();
inline bool started(ncclResult_t r, const char* call, int rank = -1, int device = -1,
                    const std::string& context = {}) {
  if (r == ncclInProgress) return true;
  check(r, call, rank, device, context);
  return false;
}

}  // namespace nccl
}  // namespace strata
