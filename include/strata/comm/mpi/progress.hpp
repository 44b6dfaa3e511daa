#pragma once
//! An MPI communicator's order of operations: every operation runs under the
//! process-wide MPI lock (SerialMpi, runtime.hpp), in the order the
//! communicator's owner issued it. Until the first non-blocking collective
//! everything runs on the caller's thread, as before; from then on a
//! progress thread (comm/progress.hpp) runs the queued operations, and a
//! blocking call issued while some are pending is queued behind them and
//! waited for. MPI is still called by one thread at a time (the lock), so
//! MPI_THREAD_SERIALIZED is enough.
//!   detail::mpi::Progress p;
//!   strata::Work w = p.submit(rank, "all_reduce", timeout, describe, [&] { ... });
//!   p.run("barrier", timeout, [&] { ... }, describe);  // after w
//! Each operation is a span of the trace (core/trace.hpp), with its bytes.

#include <chrono>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include <strata/comm/mpi/runtime.hpp>
#include <strata/comm/progress.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/trace.hpp>

namespace strata::detail::mpi {

class Progress {
 public:
  Progress() = default;
  //! The source's pending work ends first (what it queued refers to its owner).
  Progress(Progress&& o) noexcept : q_((o.drain(), std::move(o.q_))) {}
  Progress& operator=(Progress&& o) noexcept {
    if (this != &o) {
      o.drain();
      q_ = std::move(o.q_);  // our old queue runs what it holds, then ends
    }
    return *this;
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  //! Runs `op` in issue order under the MPI lock: now on this thread when
  //! nothing is pending, else after the pending operations (waited for).
  template <class Op, class What>
  void run(const char* name, std::chrono::milliseconds timeout, Op&& op, What what) {
    auto locked = [&] {
      SerialMpi lock(name, timeout);
      trace::Span span{name, trace::Category::Collective, {{"bytes", described_bytes(what)}}};
      op();
    };
    if (q_) q_->run(locked, what);
    else locked();
  }

  //! Queues `op` behind every operation issued before it; it runs on the
  //! progress thread (started now if needed) under the MPI lock.
  template <class What>
  Work submit(int rank, const char* name, std::chrono::milliseconds timeout, What what, std::function<void()> op) {
    if (!q_) {
      q_ = std::make_unique<ProgressQueue>();
      // No cancel: the running operation is already bounded by the
      // communicator's deadline, abort notices and interrupt flag.
      q_->configure("rank " + std::to_string(rank), timeout, nullptr);
    }
    return q_->submit(what, [name, timeout, bytes = described_bytes(what), op = std::move(op)] {
      SerialMpi lock(name, timeout);
      trace::Span span{name, trace::Category::Collective, {{"bytes", bytes}}};
      op();
    });
  }

  //! Waits (bounded) until everything issued so far has ended: before
  //! reading state the progress thread writes, or calling MPI on this thread.
  void drain() const noexcept {
    if (q_) q_->drain();
  }
  //! Runs what is queued and ends the progress thread.
  void stop() noexcept { q_.reset(); }

 private:
  std::unique_ptr<ProgressQueue> q_;
};

}  // namespace strata::detail::mpi
