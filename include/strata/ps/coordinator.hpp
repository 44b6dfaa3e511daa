#pragma once
//! Coordinator: the one scheduler of parameter-server training, as
//! TensorFlow's ClusterCoordinator, for both transports. schedule(fn) queues
//! fn and returns at once a RemoteValue for its result; an idle worker runs
//! it as fn(WorkerContext&) once the StalenessClock lets it start a step (a
//! thread in one process, InProcessParameterServers; over MPI a chief's
//! thread standing for one worker rank, MpiParameterServers). It decides
//! which step a worker takes, the staleness bound, what a failure does
//! (the worker is dropped, the step rescheduled, at least once), when a step
//! is given up and what join() waits for and throws:
//! docs/strategies/parameter_server.md.
//!   strata::Coordinator c{{.workers = 4, .staleness = 1}};
//!   auto loss = c.schedule([&](strata::WorkerContext& w) { return train_step(w.worker()); });
//!   c.join();  loss.get();

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/trace.hpp>
#include <strata/ps/staleness.hpp>
#include <strata/ps/step.hpp>

namespace strata {

//! The Coordinator's knobs.
struct CoordinatorOptions {
  int workers = 2;
  //! Steps a worker may run ahead of the slowest live one; 0 is lock-step,
  //! nullopt unbounded (fully asynchronous).
  std::optional<std::uint64_t> staleness = std::nullopt;
  //! How long a worker may be held back by the staleness bound before the
  //! laggards are reported (CollectiveTimeout through join()).
  std::chrono::milliseconds timeout{60000};
  //! Attempts per step before it fails for good (0: one per worker).
  int max_attempts = 0;
  //! schedule() blocks while this many steps wait to start (0: 2 per worker).
  std::size_t max_queued = 0;
  //! Called (on the failing worker's thread) for each worker failure; by
  //! default a line on stderr.
  std::function<void(const WorkerFailure&)> on_failure = {};
};

//! Schedules steps on workers under a staleness bound; see the file comment.
class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions o)
      : o_(std::move(o)), clock_(check(o_).workers, o_.staleness, o_.timeout) {
    if (!o_.on_failure)
      o_.on_failure = [](const WorkerFailure& f) {
        std::fprintf(stderr, "strata: worker %d failed step %llu (rescheduling it): %s\n", f.worker,
                     static_cast<unsigned long long>(f.step), f.what.c_str());
      };
    live_ = o_.workers;
    threads_.reserve(static_cast<std::size_t>(o_.workers));
    for (int w = 0; w < o_.workers; ++w) threads_.emplace_back([this, w] { work(w); });
  }
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  //! Stops the workers (a step in progress finishes first); steps not yet
  //! started fail with an Error.
  ~Coordinator() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (int w = 0; w < o_.workers; ++w) {
      try {
        clock_.retire(w);  // wakes a worker held back by the bound
      } catch (...) {
      }
    }
    for (auto& t : threads_) t.join();
    for (auto& t : queue_) t.abandon(std::make_exception_ptr(Error("strata: the coordinator was destroyed before the step ran")));
  }

  [[nodiscard]] int num_workers() const noexcept { return o_.workers; }
  //! Workers that have not failed.
  [[nodiscard]] int live_workers() const {
    std::lock_guard lk(mu_);
    return live_;
  }
  //! The staleness clock every worker starts and ends its steps on; its
  //! on_round hook is where a transport applies a synchronous round.
  [[nodiscard]] StalenessClock& clock() noexcept { return clock_; }
  //! Every worker failure so far, in order.
  [[nodiscard]] std::vector<WorkerFailure> failures() const {
    std::lock_guard lk(mu_);
    return failures_;
  }
  //! Called with a failed worker's index before it stops holding others back
  //! (the servers drop what it staged). Set it before scheduling steps.
  void on_worker_lost(std::function<void(int)> f) { lost_ = std::move(f); }

  //! Queues `fn` (run as fn(WorkerContext&) on some worker); returns its
  //! RemoteValue. Blocks while max_queued steps wait. Throws if no worker is
  //! left, or the error that ended the run if one did and join() has not
  //! reported it yet.
  template <class F>
    requires std::invocable<F&, WorkerContext&>
  auto schedule(F&& fn) {
    using R = std::invoke_result_t<F&, WorkerContext&>;
    auto state = std::make_shared<detail::RemoteState<R>>();
    state->progress = progress_;
    Task t;
    t.run = [state, f = std::forward<F>(fn)](WorkerContext& ctx) mutable {
      state->progress->touch();
      try {
        if constexpr (std::is_void_v<R>) {
          f(ctx);
          state->progress->touch();
          state->finish(std::monostate{}, nullptr);
        } else {
          auto r = f(ctx);
          state->progress->touch();
          state->finish(std::move(r), nullptr);
        }
      } catch (...) {
        state->progress->touch();  // an attempt failed: the step moves on
        throw;
      }
    };
    t.abandon = [state](std::exception_ptr e) {
      state->progress->touch();
      state->finish(std::nullopt, std::move(e));
    };
    const std::size_t cap = o_.max_queued ? o_.max_queued : 2 * static_cast<std::size_t>(o_.workers);
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return queue_.size() < cap || live_ == 0 || fatal_; });
    if (live_ == 0) throw Error("Coordinator::schedule: every worker has failed; " + detail::describe_failures(failures_));
    if (fatal_) std::rethrow_exception(fatal_);
    t.id = next_id_++;
    const std::uint64_t id = t.id;
    queue_.push_back(std::move(t));
    ++pending_;
    release_idle_ = false;
    lk.unlock();
    cv_.notify_all();
    return RemoteValue<R>(std::move(state), id);
  }

  //! How a run ended: the error join() throws (null: every step finished),
  //! and whether it ended the run (a transport or staleness failure) rather
  //! than failing one step on every attempt.
  struct Outcome {
    std::exception_ptr error;
    bool fatal = false;
  };
  //! join() without throwing, for a transport that must act on the outcome
  //! first (over MPI: take the servers' value after a run that completed).
  //! Reports each error once.
  [[nodiscard]] Outcome settle() {
    std::unique_lock lk(mu_);
    release_idle_ = true;  // a worker waiting for a step it will not get ends that (empty) step
    cv_.notify_all();
    cv_.wait(lk, [&] { return (pending_ == 0 && clock_.level()) || fatal_ || live_ == 0; });
    if (fatal_) {
      // steps still running may use what the caller frees next (its model,
      // a transport's messages): let them end, for at most the timeout
      cv_.wait_for(lk, o_.timeout, [&] { return running_ == 0; });
      return {std::exchange(fatal_, nullptr), true};
    }
    return {std::exchange(lost_step_, nullptr), false};
  }
  //! Waits until no step is running (taken by a worker and not yet
  //! finished or failed), at most `limit`; whether none is. After a run
  //! that ended in error (settle() waits for running steps only as long as
  //! the timeout), for a caller whose steps use memory it is about to free.
  [[nodiscard]] bool wait_running(std::chrono::steady_clock::duration limit) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return running_ == 0; });
  }
  //! Waits until every scheduled step has finished or failed for good; then
  //! throws the error that ended the run, or else the first step failure
  //! that exhausted its attempts, if any (once).
  void join() {
    if (auto o = settle(); o.error) std::rethrow_exception(o.error);
  }

 private:
  struct Task {
    std::function<void(WorkerContext&)> run;
    std::function<void(std::exception_ptr)> abandon;
    std::uint64_t id = 0;
    int attempts = 0;
  };

  static const CoordinatorOptions& check(const CoordinatorOptions& o) {
    if (o.workers < 1) throw Error("Coordinator: at least one worker, got " + std::to_string(o.workers));
    if (o.max_attempts < 0) throw Error("Coordinator: max_attempts must be >= 0");
    return o;
  }

  void finish_one() {  // with mu_ held
    --pending_;
    cv_.notify_all();
  }

  //! Runs `f` (a clock transition, whose round hook may reach the servers);
  //! if it throws, the run ends with that error. Returns whether it succeeded.
  template <class F>
  bool guarded(F&& f) {
    try {
      f();
      return true;
    } catch (...) {
      std::lock_guard lk(mu_);
      end_run_locked(std::current_exception());
      return false;
    }
  }

  void work(int w) {
    trace::name_thread("ps worker " + std::to_string(w));  // its track in a trace (core/trace.hpp)
    for (;;) {
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty() || (release_idle_ && clock_.behind(w)); });
        if (stop_) return;
      }
      std::uint64_t c = 0;
      try {
        trace::Span span{"wait for the staleness bound", trace::Category::Wait, {{"worker", w}}};
        c = clock_.begin(w);  // may wait for laggards
      } catch (const CollectiveTimeout&) {
        std::lock_guard lk(mu_);
        end_run_locked(std::current_exception());
        continue;  // the laggards are named; this worker stays available for the next run
      } catch (...) {
        return;  // retired: the coordinator is stopping
      }
      Task t;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty() || release_idle_; });
        if (stop_) return;
        if (queue_.empty()) {
          // join() released the idle: a worker behind the others finishes
          // its share of their step empty (so a synchronous round
          // completes with the steps there were), one level with the most
          // advanced withdraws the step it began; join() returns once every
          // live worker is level
          lk.unlock();
          guarded([&] {
            if (clock_.behind(w)) clock_.end(w);
            else clock_.cancel(w);
          });
          lk.lock();
          cv_.notify_all();
          continue;
        }
        t = std::move(queue_.front());
        queue_.pop_front();
        ++running_;
        cv_.notify_all();  // room in the queue
      }
      WorkerContext ctx{w, t.id, c, t.attempts};
      try {
        t.run(ctx);
      } catch (const detail::TransportError& e) {
        t.abandon(e.inner());
        guarded([&] { clock_.cancel(w); });
        std::lock_guard lk(mu_);
        --running_;
        finish_one();
        end_run_locked(e.inner());
        continue;  // the transport failed, not this worker
      } catch (...) {
        failed(w, std::move(t), std::current_exception());
        return;  // a failed worker runs nothing more
      }
      guarded([&] { clock_.end(w); });
      std::lock_guard lk(mu_);
      --running_;
      finish_one();
    }
  }

  void failed(int w, Task t, std::exception_ptr e) {
    const WorkerFailure f{w, t.id, detail::what_of(e)};
    o_.on_failure(f);
    if (lost_) guarded([&] { lost_(w); });
    guarded([&] { clock_.retire(w); });
    std::lock_guard lk(mu_);
    --running_;
    failures_.push_back(f);
    --live_;
    ++t.attempts;
    if (fatal_) {  // the run already ended (the servers did not answer the drop): no retry
      t.abandon(fatal_);
      finish_one();
      return;
    }
    auto err = detail::give_up(t.id, t.attempts, o_.max_attempts, o_.workers, live_, failures_);
    if (!err) {
      queue_.push_front(std::move(t));  // rescheduled: next on the next idle worker
      cv_.notify_all();
      return;
    }
    if (!lost_step_) lost_step_ = err;
    t.abandon(err);
    finish_one();
    if (live_ == 0) fail_queue_locked(err);
  }

  //! The run cannot go on: remember the first such error for join(), fail
  //! every step still queued with it.
  void end_run_locked(std::exception_ptr e) {
    if (!fatal_) fatal_ = std::move(e);
    fail_queue_locked(fatal_);
  }

  void fail_queue_locked(std::exception_ptr e) {
    for (auto& q : queue_) {
      q.abandon(e);
      --pending_;
    }
    queue_.clear();
    cv_.notify_all();
  }

  CoordinatorOptions o_;
  StalenessClock clock_;
  std::shared_ptr<detail::StepProgress> progress_ = std::make_shared<detail::StepProgress>(o_.timeout);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::vector<std::thread> threads_;
  std::function<void(int)> lost_;
  std::vector<WorkerFailure> failures_;
  std::exception_ptr fatal_, lost_step_;
  std::uint64_t next_id_ = 0;
  std::size_t pending_ = 0;  // scheduled, not yet finished or given up
  std::size_t running_ = 0;  // taken by a worker, not yet finished or failed
  int live_ = 0;
  bool stop_ = false, release_idle_ = false;
};

}  // namespace strata
