#pragma once
//! Persistent replica threads: created once with the strategy, each runs the
//! function given to Strategy::run with its replica id. A failure on one
//! replica aborts the team (releasing replicas blocked in collectives) and
//! reaches the caller as ReplicaError.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/threads/team.hpp>
#include <strata/core/error.hpp>
#include <strata/core/trace.hpp>

namespace strata::detail {

inline const void*& current_pool() {
  thread_local const void* pool = nullptr;
  return pool;
}

class ReplicaPool {
 public:
  //! `inline_single`: with one replica, run on the caller's thread (the
  //! default strategy) instead of on a thread of its own.
  ReplicaPool(int p, CommOptions opts, bool inline_single = false)
      : team_(p, opts), errors_(static_cast<std::size_t>(p)) {
    if (!(inline_single && p == 1))
      for (int r = 0; r < p; ++r) threads_.emplace_back([this, r] { worker(r); });
  }
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;
  ~ReplicaPool() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  [[nodiscard]] int size() const noexcept { return team_.size(); }
  Team& team() noexcept { return team_; }

  //! Runs job(r) on every replica r and waits for all of them.
  void run(const std::function<void(int)>& job) {
    if (current_pool() == this)
      throw Error("strata: Strategy::run was called from inside one of its own replicas; "
                  "call collectives through the replica context instead");
    std::lock_guard serial(run_mu_);  // one run at a time per strategy
    team_.reset();
    for (auto& e : errors_) e = nullptr;
    if (threads_.empty()) {
      execute(0, job);
    } else {
      std::unique_lock lk(mu_);
      job_ = &job;
      remaining_ = size();
      ++generation_;
      start_cv_.notify_all();
      done_cv_.wait(lk, [&] { return remaining_ == 0; });
      job_ = nullptr;
    }
    rethrow_first();
  }

 private:
  void execute(int r, const std::function<void(int)>& job) {
    const void* saved = current_pool();
    current_pool() = this;
    try {
      job(r);
    } catch (const std::exception& e) {
      errors_[static_cast<std::size_t>(r)] = std::current_exception();
      team_.abort(r, e.what());
    } catch (...) {
      errors_[static_cast<std::size_t>(r)] = std::current_exception();
      team_.abort(r, "an exception not derived from std::exception");
    }
    current_pool() = saved;
    team_.depart(r);
  }

  void worker(int r) {
    trace::name_thread("replica " + std::to_string(r));  // its track in a trace (core/trace.hpp)
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock lk(mu_);
        start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      execute(r, *job);
      std::lock_guard lk(mu_);
      if (--remaining_ == 0) done_cv_.notify_one();
    }
  }

  //! Reports the failure that explains the others: a replica's own error
  //! first, then a collective that could not complete (timeout, departed
  //! replica), and only then CollectiveAborted, which is always a
  //! consequence. Among equals, the lowest replica.
  void rethrow_first() {
    int first = -1, best = 3;
    for (int r = 0; r < size(); ++r) {
      auto& e = errors_[static_cast<std::size_t>(r)];
      if (!e) continue;
      int rank = 0;
      try {
        std::rethrow_exception(e);
      } catch (const CollectiveAborted&) {
        rank = 2;
      } catch (const CollectiveTimeout&) {
        rank = 1;
      } catch (...) {
      }
      if (rank < best) {
        best = rank;
        first = r;
      }
    }
    if (first < 0) return;
    auto e = errors_[static_cast<std::size_t>(first)];
    throw ReplicaError(first, size(), e, what_of(e));
  }

  Team team_;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int remaining_ = 0;
  bool stop_ = false;
};

}  // namespace strata::detail
