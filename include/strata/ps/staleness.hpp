#pragma once
//! The staleness bound of asynchronous training, as stale synchronous
//! parallel (SSP) clocks: each worker counts the steps it has finished, and
//! a worker may start its next step only while no live worker is more than
//! `bound` steps behind it. bound 0 is lock-step (synchronous); no bound is
//! fully asynchronous. A worker that stops (done, or failed) no longer holds
//! the others back. Waiting is bounded: a worker held back longer than the
//! timeout raises CollectiveTimeout naming the workers it waited for. The
//! Coordinator keeps one for both transports (worker threads, MPI worker ranks).
//!   strata::StalenessClock clock{4, 1, std::chrono::seconds(30)};   // 4 workers, at most 1 step apart
//!   clock.begin(w);  /* pull, compute, push */  clock.end(w);

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <strata/core/error.hpp>

namespace strata {

//! Stale-synchronous-parallel clocks of `workers` workers (see the file comment).
class StalenessClock {
 public:
  //! `workers` workers; `bound`: how many steps a worker may run ahead of the
  //! slowest live one (nullopt: unbounded).
  StalenessClock(int workers, std::optional<std::uint64_t> bound, std::chrono::milliseconds timeout)
      : bound_(bound), timeout_(timeout), clock_(static_cast<std::size_t>(workers), 0),
        live_(static_cast<std::size_t>(workers), true), started_(static_cast<std::size_t>(workers), false) {
    if (workers < 1) throw Error("StalenessClock: at least one worker, got " + std::to_string(workers));
  }

  [[nodiscard]] int workers() const noexcept { return static_cast<int>(clock_.size()); }
  [[nodiscard]] std::optional<std::uint64_t> bound() const noexcept { return bound_; }

  //! Worker `w` starts its next step (number clock(w), from 0): waits until
  //! every live worker has finished at least clock(w) - bound steps. Returns
  //! the step number.
  std::uint64_t begin(int w) {
    std::unique_lock lk(mu_);
    check(w, "begin");
    if (started_[idx(w)]) throw Error("StalenessClock::begin: worker " + std::to_string(w) + " already began a step");
    const std::uint64_t c = clock_[idx(w)];
    if (bound_) {
      const std::uint64_t need = c > *bound_ ? c - *bound_ : 0;
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      while (slowest_live() < need) {
        if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && slowest_live() < need) {
          std::string who;
          for (std::size_t v = 0; v < clock_.size(); ++v)
            if (live_[v] && clock_[v] < need) {
              if (!who.empty()) who += ", ";
              who += "worker ";
              who += std::to_string(v);
              who += " (finished ";
              who += std::to_string(clock_[v]);
              who += " steps)";
            }
          throw CollectiveTimeout("strata: worker " + std::to_string(w) + " waited " +
                                  std::to_string(timeout_.count()) + " ms to start step " + std::to_string(c) +
                                  " (staleness bound " + std::to_string(*bound_) + ") for " + who);
        }
        check(w, "begin");
      }
    }
    started_[idx(w)] = true;
    // instrumentation: how far ahead of the slowest live worker a step started
    const std::uint64_t slow = slowest_live();
    max_gap_ = std::max(max_gap_, c > slow ? c - slow : 0);
    return c;
  }

  //! Calls `hook(n)` whenever every live worker has finished n steps (n
  //! grows by one each call), before any worker may start step n: with
  //! bound 0, the place to apply a synchronous round. Runs on the thread that
  //! completed the round, with the clock locked (keep it short; it must not
  //! call back into the clock). If it throws, end() or retire() throws it
  //! and the round is announced again at the next transition.
  void on_round(std::function<void(std::uint64_t)> hook) {
    std::lock_guard lk(mu_);
    hook_ = std::move(hook);
  }

  //! Worker `w` finished the step it began.
  void end(int w) {
    const NotifyOnExit wake{cv_};  // also when the round hook throws: waiters re-check
    {
      std::lock_guard lk(mu_);
      check(w, "end");
      if (!started_[idx(w)]) throw Error("StalenessClock::end: worker " + std::to_string(w) + " began no step");
      started_[idx(w)] = false;
      ++clock_[idx(w)];
      rounds_completed();
    }
  }

  //! Worker `w` takes no more steps (finished, or failed): it no longer
  //! holds the others back. Its unfinished step, if any, does not count.
  void retire(int w) {
    const NotifyOnExit wake{cv_};
    {
      std::lock_guard lk(mu_);
      if (w < 0 || w >= workers()) throw Error("StalenessClock::retire: no worker " + std::to_string(w));
      live_[idx(w)] = false;
      started_[idx(w)] = false;
      rounds_completed();
    }
  }

  //! Worker `w` withdraws the step it began, as if it had not (nothing ran).
  void cancel(int w) {
    {
      std::lock_guard lk(mu_);
      check(w, "cancel");
      started_[idx(w)] = false;
    }
    cv_.notify_all();
  }
  //! Whether live worker `w` has finished fewer steps than some live worker.
  [[nodiscard]] bool behind(int w) const {
    std::lock_guard lk(mu_);
    if (w < 0 || w >= workers() || !live_[idx(w)]) return false;
    for (std::size_t v = 0; v < clock_.size(); ++v)
      if (live_[v] && clock_[v] > clock_[idx(w)]) return true;
    return false;
  }
  //! Whether every live worker has finished the same number of steps and none is in one.
  [[nodiscard]] bool level() const {
    std::lock_guard lk(mu_);
    std::optional<std::uint64_t> c;
    for (std::size_t v = 0; v < clock_.size(); ++v) {
      if (!live_[v]) continue;
      if (started_[v] || (c && *c != clock_[v])) return false;
      c = clock_[v];
    }
    return true;
  }

  //! Steps worker `w` has finished.
  [[nodiscard]] std::uint64_t clock(int w) const {
    std::lock_guard lk(mu_);
    return clock_.at(idx(w));
  }
  //! The most steps any step began ahead of the slowest live worker (never
  //! more than the bound): what tests assert.
  [[nodiscard]] std::uint64_t max_observed_gap() const {
    std::lock_guard lk(mu_);
    return max_gap_;
  }

 private:
  //! Wakes every waiter when it goes out of scope (after the lock is released).
  struct NotifyOnExit {
    std::condition_variable& cv;
    ~NotifyOnExit() { cv.notify_all(); }
  };
  static std::size_t idx(int w) noexcept { return static_cast<std::size_t>(w); }
  void check(int w, const char* what) const {
    if (w < 0 || w >= workers())
      throw Error(std::string("StalenessClock::") + what + ": no worker " + std::to_string(w) + " (there are " +
                  std::to_string(workers()) + ")");
    if (!live_[idx(w)])
      throw Error(std::string("StalenessClock::") + what + ": worker " + std::to_string(w) + " was retired");
  }
  //! Runs the hook for every round the slowest live worker has newly completed.
  void rounds_completed() {
    const std::uint64_t slow = slowest_live();
    if (slow == std::numeric_limits<std::uint64_t>::max()) return;  // nobody left
    for (; rounds_ < slow; ++rounds_)
      if (hook_) hook_(rounds_ + 1);
  }
  //! The fewest steps finished by a live worker (all retired: no limit).
  [[nodiscard]] std::uint64_t slowest_live() const noexcept {
    std::uint64_t m = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t v = 0; v < clock_.size(); ++v)
      if (live_[v]) m = std::min(m, clock_[v]);
    return m;
  }

  std::optional<std::uint64_t> bound_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::uint64_t> clock_;
  std::vector<bool> live_, started_;
  std::uint64_t max_gap_ = 0;
  std::uint64_t rounds_ = 0;  // rounds announced to the hook
  std::function<void(std::uint64_t)> hook_;
};

}  // namespace strata
