#pragma once
//! strata::Work: the handle of one non-blocking collective (as c10d's Work):
//! wait() (bounded; throws the typed error the blocking call would),
//! test() (never blocks), is_completed(); move-only, completed when
//! default-constructed. Behind it, a WorkState that the thread running the
//! operation completes (threads, MPI) or a PolledWork the host polls (a
//! device communicator's event).
//!   strata::Work w = comm.all_reduce_async(grad, strata::Sum);
//!   ...                        // compute while the reduction runs
//!   w.wait();                  // grad holds the sum, or the typed error is thrown
//! What a Work promises (same bits and errors as the blocking call, its
//! bound, buffers that belong to the operation until it ended, a Work
//! destroyed unwaited): docs/collectives.md, "Non-blocking collectives: Work".

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <strata/core/error.hpp>

namespace strata {

class Work;

namespace detail {

//! The shared state of one queued operation: completed once, by the thread
//! that ran it; read by the Work that waits for it.
struct WorkState {
  WorkState(std::string what_, std::chrono::steady_clock::duration bound_,
            std::function<void(const std::string&)> cancel_)
      : what(std::move(what_)), bound(bound_), cancel(std::move(cancel_)) {}

  //! The operation ended: `e` is its error (null on success).
  void finish(std::exception_ptr e) {
    {
      std::lock_guard lk(mu);
      error = std::move(e);
      done = true;
    }
    cv.notify_all();
  }

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;         // guarded by mu
  std::exception_ptr error;  // guarded by mu; set before done
  const std::string what;    // "all_reduce(float, 1000 elements) on replica 1"
  //! How long wait() may take from its call before it gives up on the operation.
  const std::chrono::steady_clock::duration bound;
  //! Ends the communicator's collectives early (may be empty): called with
  //! the reason when the bound passes.
  const std::function<void(const std::string&)> cancel;
};

//! The state of an operation no thread completes, asked instead (a GPU
//! stream's event): test() polls once (throwing the typed error once it
//! failed), wait() polls under the communicator's deadline and throws the
//! typed error itself (aborting what it must); both keep the outcome, so
//! later calls repeat it. is_completed() never throws.
class PolledWork {
 public:
  virtual ~PolledWork() = default;
  [[nodiscard]] virtual bool is_completed() const = 0;
  virtual bool test() = 0;
  virtual void wait() = 0;
  //! A Work dropped before it was waited for: its operation settles
  //! (bounded, as wait()); what was only to follow it may be left out.
  virtual void settle() { wait(); }
};

//! A Work followed by `then`, run once by the first test() that finds the
//! Work completed or by wait(), on that caller's thread: the rest of a
//! collective done in two parts (a staged copy's upload, a sum across
//! workers after the local one). Its outcome is the Work's error, else
//! then's. Dropped unwaited, the Work settles and `then` does not run.
//! `then` may own what the Work's operation uses: it is destroyed after it.
class FollowedWork final : public PolledWork {
 public:
  FollowedWork(Work first, std::function<void()> then);
  ~FollowedWork() override;
  [[nodiscard]] bool is_completed() const override { return ended_; }
  bool test() override;
  void wait() override;
  void settle() override;

 private:
  //! ask(): whether the operation ended (its error thrown); once it has, the rest follows. The outcome
  //! is kept: later calls repeat it.
  template <class Ask>
  bool advance(Ask&& ask);
  void follow();
  std::function<void()> then_;  // declared before first_: outlives its operation
  std::unique_ptr<Work> first_;
  bool ended_ = false;
  std::exception_ptr error_;
};

}  // namespace detail

//! The handle of one non-blocking operation (see the top of this header).
//!   auto w = comm.all_reduce_async(bucket, strata::Sum);  ...;  w.wait();
class Work {
 public:
  //! A completed Work (nothing to wait for).
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> s) noexcept : s_(std::move(s)) {}
  //! A Work asked through `p` (see detail::PolledWork).
  explicit Work(std::unique_ptr<detail::PolledWork> p) noexcept : p_(std::move(p)) {}
  Work(Work&& o) noexcept = default;
  Work& operator=(Work&& o) noexcept {
    if (this != &o) {
      settle();
      s_ = std::move(o.s_);
      p_ = std::move(o.p_);
    }
    return *this;
  }
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work() { settle(); }

  //! Whether the operation has ended (completed or failed); never blocks.
  [[nodiscard]] bool is_completed() const {
    if (p_) return p_->is_completed();
    if (!s_) return true;
    std::lock_guard lk(s_->mu);
    return s_->done;
  }

  //! Non-blocking: true once the operation completed, false while it runs;
  //! rethrows its error once it failed.
  bool test() {
    if (p_) return p_->test();
    if (!s_) return true;
    std::unique_lock lk(s_->mu);
    if (!s_->done) return false;
    if (s_->error) std::rethrow_exception(s_->error);
    return true;
  }

  //! Blocks until the operation completed (then its buffers are the
  //! caller's again), or rethrows its typed error. Bounded: see the header.
  void wait() {
    if (p_) return p_->wait();
    if (!s_) return;
    std::unique_lock lk(s_->mu);
    if (!s_->cv.wait_for(lk, s_->bound, [&] { return s_->done; })) {
      lk.unlock();
      const std::string why = s_->what + " did not complete within " + std::to_string(ms(s_->bound)) +
                              " ms (the communicator's deadline for it and for each operation queued ahead of "
                              "it, plus a margin)";
      if (s_->cancel) s_->cancel(why);
      lk.lock();
      last_resort(lk);
      if (s_->error) throw CollectiveTimeout("strata: " + why + "; it then ended with: " +
                                             detail::what_of(s_->error));
      return;  // it completed meanwhile: the result is there
    }
    if (s_->error) std::rethrow_exception(s_->error);
  }

 private:
  static long long ms(std::chrono::steady_clock::duration d) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  }

  //! Waits (holding `lk`) for an operation already past its bound, and
  //! cancelled where possible: ten times the bound, at least 5 minutes; then
  //! ends the process rather than return while the operation uses its buffers.
  void last_resort(std::unique_lock<std::mutex>& lk) {
    const auto limit = std::max<std::chrono::steady_clock::duration>(10 * s_->bound, std::chrono::minutes(5));
    if (s_->cv.wait_for(lk, limit, [&] { return s_->done; })) return;
    std::fprintf(stderr,
                 "strata: %s is still running %lld ms after its deadline; ending the process rather than "
                 "free buffers the operation still uses\n",
                 s_->what.c_str(), ms(limit));
    std::fflush(stderr);
    std::abort();
  }

  //! Before the handle goes: wait (bounded) so that no buffer stays in use.
  void settle() noexcept {
    if (!s_ && !p_) return;
    try {
      if (p_) p_->settle();
      else wait();
    } catch (...) {  // dropped: the communicator reports the failure at its next operation
    }
    s_.reset();
    p_.reset();
  }

  std::shared_ptr<detail::WorkState> s_;
  std::unique_ptr<detail::PolledWork> p_;
};

namespace detail {

inline FollowedWork::FollowedWork(Work first, std::function<void()> then)
    : then_(std::move(then)), first_(std::make_unique<Work>(std::move(first))) {}

inline FollowedWork::~FollowedWork() = default;

inline void FollowedWork::follow() {
  ended_ = true;
  try {
    if (then_) then_();
  } catch (...) {
    error_ = std::current_exception();
  }
}

template <class Ask>
bool FollowedWork::advance(Ask&& ask) {
  if (!ended_) {
    try {
      if (!ask()) return false;
    } catch (...) {
      ended_ = true;
      error_ = std::current_exception();
      throw;
    }
    follow();
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

inline bool FollowedWork::test() {
  return advance([&] { return first_->test(); });
}

inline void FollowedWork::wait() {
  advance([&] {
    first_->wait();
    return true;
  });
}

inline void FollowedWork::settle() {
  ended_ = true;
  first_.reset();  // settles the operation (bounded) and drops its error
}

}  // namespace detail
}  // namespace strata
