#pragma once
//! The global batches of one execution of a synchronous executor
//! (Pass::steps_per_execution steps in one run of the replicas), as the
//! replicas take them: the caller takes the first (the model builds on it),
//! then local replica 0 takes batch k + 1 as step k starts and hands it
//! over, so the others find it there when they reach it, and a data
//! pipeline's prefetch keeps running ahead of the steps as it does at one
//! step a time. Data that ends, or a batch that cannot be taken (its error
//! kept for the caller), ends the execution after the step before it: the
//! steps before are run and applied, as one step at a time would.
//!   ExecutionBatches e;  e.start(pass, limit);  if (!e.take_first()) ...;
//!   // replica 0: e.take_next(k);  every replica r: if (!e.wait_for(k, r)) break;  step on e.batch(k)
//!   // replica 0 leaving, on any path: e.close();

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/execution/pass.hpp>

namespace strata::detail {

class ExecutionBatches {
 public:
  //! A fresh execution of at most `limit` steps over `pass`'s batches;
  //! `taken(batch, rows)` readies each batch as it is taken (before any
  //! replica steps on it).
  //! A replica waits at most `deadline` for a batch (then CollectiveTimeout),
  //! spinning first only when each replica has a core (`spin`).
  void start(Pass& pass, std::size_t limit, std::function<void(const Batch&, std::size_t)> taken = {},
             std::chrono::milliseconds deadline = std::chrono::minutes(2), bool spin = true) {
    pass_ = &pass;
    deadline_ = deadline;
    spin_ = spin ? 4096 : 0;
    taken_fn_ = std::move(taken);
    batches_.assign(limit, Batch{});
    global_.assign(limit, 0);
    ready_.store(0, std::memory_order_relaxed);
    closed_.store(false, std::memory_order_relaxed);
    ended_ = false;
    error_ = nullptr;
  }
  //! The caller: takes the first batch; false when the data ended.
  bool take_first() {
    if (batches_.empty() || !take(0)) return false;
    publish(1);
    return true;
  }
  //! The caller: the whole execution at once (`batches`, each of `global`
  //! rows: what the workers agreed on), nothing taken during the run.
  void set(std::vector<Batch> batches, std::vector<std::size_t> global) {
    batches_ = std::move(batches);
    global_ = std::move(global);
    for (std::size_t k = 0; k < batches_.size(); ++k)
      if (taken_fn_) taken_fn_(batches_[k], global_[k]);
    publish(batches_.size());
    close();
  }
  //! Local replica 0, as step k starts: takes batch k + 1 (if the execution
  //! goes on past k) and hands it over; a pass that ends there, or throws,
  //! closes the execution after step k.
  void take_next(std::size_t k) {
    if (k + 1 >= batches_.size() || is_closed()) return;
    bool got = false;
    try {
      got = take(k + 1);
    } catch (...) {
      std::lock_guard lk(mu_);
      error_ = std::current_exception();
    }
    if (!got) return close(!error_);
    publish(k + 2);
  }
  //! Whether batch k is there to step on (replica r waits for replica 0 to
  //! take it, at most the deadline); false: the execution ends before it.
  bool wait_for(std::size_t k, std::size_t r) {
    if (k >= batches_.size()) return false;
    for (int spin = 0; spin < spin_; ++spin) {  // replica 0 takes it as the step before starts: usually there
      if (ready_.load(std::memory_order_acquire) > k) return true;
      if (closed_.load(std::memory_order_acquire)) break;
    }
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, deadline_, [&] { return ready_.load(std::memory_order_acquire) > k || closed_.load(); }))
      throw CollectiveTimeout("strata: replica " + std::to_string(r) + " waited " +
                              std::to_string(deadline_.count()) + " ms for batch " + std::to_string(k) +
                              " of its execution (steps_per_execution), which local replica 0 takes from the data "
                              "as the step before starts: replica 0 is still in that step or in the dataset's next()");
    return ready_.load(std::memory_order_acquire) > k;
  }
  //! Local replica 0 leaves the execution (on every path, a failure's
  //! included): nothing more will be handed over.
  void close(bool data_ended = false) {
    {
      std::lock_guard lk(mu_);  // a waiter between its check and its sleep sees it
      closed_.store(true, std::memory_order_release);
      ended_ = ended_ || data_ended;
    }
    cv_.notify_all();
  }

  [[nodiscard]] const Batch& batch(std::size_t k) const { return batches_[k]; }
  [[nodiscard]] std::size_t global(std::size_t k) const { return global_[k]; }
  //! Whether the pass's data ended within this execution.
  [[nodiscard]] bool data_ended() const {
    std::lock_guard lk(mu_);
    return ended_;
  }
  //! What taking a batch threw (null: nothing).
  [[nodiscard]] std::exception_ptr error() const {
    std::lock_guard lk(mu_);
    return error_;
  }

 private:
  bool take(std::size_t k) {
    std::optional<Batch> b = pass_->next();
    if (!b) return false;
    batches_[k] = *b;
    global_[k] = b->x->shape()[0];
    if (taken_fn_) taken_fn_(batches_[k], global_[k]);
    return true;
  }
  void publish(std::size_t n) {
    {
      std::lock_guard lk(mu_);  // a waiter between its check and its sleep sees it
      ready_.store(n, std::memory_order_release);
    }
    cv_.notify_all();
  }
  [[nodiscard]] bool is_closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  Pass* pass_ = nullptr;
  std::chrono::milliseconds deadline_{std::chrono::minutes(2)};
  std::function<void(const Batch&, std::size_t)> taken_fn_;
  std::vector<Batch> batches_;
  std::vector<std::size_t> global_;
  std::atomic<std::size_t> ready_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> closed_{false};
  bool ended_ = false;
  int spin_ = 4096;
  std::exception_ptr error_;
};

}  // namespace strata::detail
