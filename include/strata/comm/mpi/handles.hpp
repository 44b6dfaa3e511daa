#pragma once
//! Owned MPI handles of the MPI communicator: the requests of a call in
//! flight (cancelled when the call fails) and the duplicated communicator
//! (freed with it), plus the message tags its protocol uses.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/runtime.hpp>

namespace strata::detail::mpi {

//! Tags of the communicator's own messages. Point-to-point messages use
//! tags from p2p_tag_base up (see point_to_point.hpp), so a user's tag can
//! never be taken for a collective's header, data or abort notice.
enum Tag : int { tag_call = 1, tag_ring = 2, tag_abort = 3, tag_data = 4, p2p_tag_base = 8 };

//! Requests of a call in flight: whatever is still pending when the call
//! fails is cancelled (receives) or released (sends).
struct Pending {
  std::vector<MPI_Request> reqs;
  Pending() = default;
  Pending(Pending&& o) noexcept : reqs(std::move(o.reqs)) { o.reqs.clear(); }
  Pending& operator=(Pending&& o) noexcept {
    if (this != &o) {
      cancel();
      reqs = std::move(o.reqs);
      o.reqs.clear();
    }
    return *this;
  }
  ~Pending() { cancel(); }
  //! Cancels `p`'s requests when the scope is left by an exception (the
  //! communicator's reused request lists, kept between calls to avoid allocating).
  struct OnThrow {
    Pending& p;
    int live = std::uncaught_exceptions();
    ~OnThrow() {
      if (std::uncaught_exceptions() > live) p.cancel();
    }
  };
  void cancel() noexcept {
    for (auto& r : reqs) {
      if (r == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Cancel(&r);
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      }
    }
    reqs.clear();
  }
  //! Whether every request has completed (the completed ones become MPI_REQUEST_NULL).
  [[nodiscard]] bool test_all() {
    int all = 0;
    MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &all, MPI_STATUSES_IGNORE);
    return all != 0;
  }
};

//! An owned communicator: freed when destroyed (unless MPI is already
//! finalized), handed over when moved. Converts to MPI_Comm for MPI calls.
class CommHandle {
 public:
  CommHandle() = default;
  CommHandle(CommHandle&& o) noexcept : c_(std::exchange(o.c_, MPI_COMM_NULL)), keep_(o.keep_) {}
  CommHandle& operator=(CommHandle&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = std::exchange(o.c_, MPI_COMM_NULL);
      keep_ = o.keep_;
    }
    return *this;
  }
  //! Never free it: a collective given up on it may still be in progress
  //! (MPI would touch the freed communicator when it progresses).
  void keep_forever() noexcept { keep_ = true; }
  [[nodiscard]] bool kept() const noexcept { return keep_; }
  ~CommHandle() { reset(); }
  //! A duplicate of `parent`, made without blocking, so that a rank that
  //! never calls this is reported (CollectiveTimeout after `timeout`), not waited for.
  static CommHandle dup(MPI_Comm parent, std::chrono::milliseconds timeout) {
    CommHandle h;
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Comm_idup(parent, h.out(), &req), "MPI_Comm_idup");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int i = 0;; ++i) {
      int flag = 0;
      MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (flag) return h;
      if (std::chrono::steady_clock::now() > deadline) {
        runtime().note_failure(timeout);
        int rank = 0, size = 1;
        MPI_Comm_rank(parent, &rank);
        MPI_Comm_size(parent, &size);
        std::string others;
        for (int r = 0; r < size; ++r)
          if (r != rank) {
            if (!others.empty()) others += ", ";
            others += std::to_string(r);
          }
        h.c_ = MPI_COMM_NULL;  // not made: never freed (MPI can neither cancel nor free a pending MPI_Comm_idup)
        throw CollectiveTimeout("strata: creating an MPI communicator timed out after " +
                                std::to_string(timeout.count()) + " ms on rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + ": not every rank created it; some of rank(s) " + others +
                                " did not take part (stopped, hung, or calling something else)");
      }
      if (i > 2000) std::this_thread::yield();
    }
  }
  //! Takes ownership of `c` (freed with the handle).
  static CommHandle adopt(MPI_Comm c) noexcept {
    CommHandle h;
    h.c_ = c;
    return h;
  }
  operator MPI_Comm() const noexcept { return c_; }  // NOLINT: used as the handle it wraps
  //! Where MPI_Comm_idup writes the new communicator.
  MPI_Comm* out() noexcept { return &c_; }

 private:
  void reset() noexcept {
    int fin = 0;
    MPI_Finalized(&fin);
    if (c_ != MPI_COMM_NULL && !fin && !keep_) MPI_Comm_free(&c_);
    c_ = MPI_COMM_NULL;
  }
  MPI_Comm c_ = MPI_COMM_NULL;
  bool keep_ = false;
};

//! Whether two memory ranges overlap (MPI forbids aliased send and receive buffers).
inline bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

}  // namespace strata::detail::mpi
