#pragma once
//! Coordinator: schedules steps on worker threads, as TensorFlow's
//! ClusterCoordinator does on worker tasks. schedule(fn) queues fn and
//! returns at once a RemoteValue for its result; an idle worker runs it as
//! fn(WorkerContext&) once the staleness bound lets it start a step. If fn
//! throws, that worker is taken as failed: the failure is recorded
//! (failures(), and the on_failure hook), the worker runs nothing more, and
//! the step is rescheduled on another worker. A step that failed on every
//! attempt (max_attempts, or no worker left) fails its RemoteValue, and
//! join() throws it. join() waits for every scheduled step.
//!   strata::Coordinator c{{.workers = 4, .staleness = 1}};
//!   auto loss = c.schedule([&](strata::WorkerContext& w) { return train_step(w.worker()); });
//!   c.join();  loss.get();
//! Steps are at-least-once: a step that fails after pushing part of its
//! gradient has that part applied again when it is rescheduled.

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
#include <strata/ps/staleness.hpp>

namespace strata {

//! A worker's failure while running a step.
struct WorkerFailure {
  int worker = 0;
  std::uint64_t step = 0;  //!< the schedule() number of the step (from 0)
  std::string what;
};

namespace detail {
//! "failures: [worker 1, step 10: what] ..." for error messages.
inline std::string describe_failures(const std::vector<WorkerFailure>& fs) {
  std::string s = "failures:";
  for (const auto& f : fs) {
    s += " [worker ";
    s += std::to_string(f.worker);
    s += ", step ";
    s += std::to_string(f.step);
    s += ": ";
    s += f.what;
    s += "]";
  }
  return s;
}
//! After a step's failed attempt number `attempts`: null when it should run
//! again (attempts left, of `max_attempts` or else one per worker, and a
//! live worker to take it), else the error that fails it for good.
inline std::exception_ptr give_up(std::uint64_t step, int attempts, int max_attempts, int workers, int live,
                                  const std::vector<WorkerFailure>& failures) {
  if (attempts < (max_attempts ? max_attempts : workers) && live > 0) return nullptr;
  return std::make_exception_ptr(Error("strata: step " + std::to_string(step) + " failed on " +
                                       std::to_string(attempts) + " attempt(s) and is given up; " +
                                       describe_failures(failures)));
}
}  // namespace detail

//! Where a scheduled step runs.
class WorkerContext {
 public:
  WorkerContext(int worker, std::uint64_t step, std::uint64_t clock, int attempt) noexcept
      : worker_(worker), step_(step), clock_(clock), attempt_(attempt) {}
  //! The worker running the step.
  [[nodiscard]] int worker() const noexcept { return worker_; }
  //! The step's schedule() number.
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  //! Steps this worker finished before this one (its staleness clock).
  [[nodiscard]] std::uint64_t clock() const noexcept { return clock_; }
  //! 0 on the first attempt, then 1, 2, ... after workers failed it.
  [[nodiscard]] int attempt() const noexcept { return attempt_; }

 private:
  int worker_;
  std::uint64_t step_, clock_;
  int attempt_;
};

//! What a step's RemoteValue holds while it runs.
namespace detail {
template <class R>
struct RemoteState {
  using Stored = std::conditional_t<std::is_void_v<R>, std::monostate, R>;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Stored> value;
  std::exception_ptr error;
  bool done = false;
  void finish(std::optional<Stored> v, std::exception_ptr e) {
    {
      std::lock_guard lk(mu);
      value = std::move(v);
      error = std::move(e);
      done = true;
    }
    cv.notify_all();
  }
};
}  // namespace detail

//! The result of a scheduled step, available once it ran.
template <class R>
class RemoteValue {
 public:
  RemoteValue() = default;
  explicit RemoteValue(std::shared_ptr<detail::RemoteState<R>> s, std::uint64_t step) : s_(std::move(s)), step_(step) {}
  //! Waits for the step; returns its result, or throws what made it fail on every attempt.
  R get() const {
    std::unique_lock lk(state().mu);
    state().cv.wait(lk, [&] { return state().done; });
    if (state().error) std::rethrow_exception(state().error);
    if constexpr (!std::is_void_v<R>) return *state().value;
  }
  [[nodiscard]] bool ready() const {
    std::lock_guard lk(state().mu);
    return state().done;
  }
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }

 private:
  detail::RemoteState<R>& state() const {
    if (!s_) throw Error("RemoteValue: empty (not returned by Coordinator::schedule)");
    return *s_;
  }
  std::shared_ptr<detail::RemoteState<R>> s_;
  std::uint64_t step_ = 0;
};

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
  //! Stops the workers; steps not yet started fail with an Error.
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
  [[nodiscard]] StalenessClock& clock() noexcept { return clock_; }
  //! Every worker failure so far, in order.
  [[nodiscard]] std::vector<WorkerFailure> failures() const {
    std::lock_guard lk(mu_);
    return failures_;
  }
  //! Called with a failed worker's index before it stops holding others back
  //! (the servers drop what it staged).
  void on_worker_lost(std::function<void(int)> f) { lost_ = std::move(f); }

  //! Queues `fn` (run as fn(WorkerContext&) on some worker); returns its
  //! RemoteValue. Blocks while max_queued steps wait. Throws if no worker is left.
  template <class F>
    requires std::invocable<F&, WorkerContext&>
  auto schedule(F&& fn) {
    using R = std::invoke_result_t<F&, WorkerContext&>;
    auto state = std::make_shared<detail::RemoteState<R>>();
    Task t;
    t.run = [state, f = std::forward<F>(fn)](WorkerContext& ctx) mutable {
      if constexpr (std::is_void_v<R>) {
        f(ctx);
        state->finish(std::monostate{}, nullptr);
      } else {
        state->finish(f(ctx), nullptr);
      }
    };
    t.abandon = [state](std::exception_ptr e) { state->finish(std::nullopt, std::move(e)); };
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

  //! Waits until every scheduled step has finished or failed for good; then
  //! throws the first step failure that exhausted its attempts, or a
  //! staleness timeout, if any (once).
  void join() {
    std::unique_lock lk(mu_);
    release_idle_ = true;  // a worker waiting for a step it will not get ends that (empty) step
    cv_.notify_all();
    cv_.wait(lk, [&] { return (pending_ == 0 && clock_.level()) || fatal_ || live_ == 0; });
    if (fatal_) {
      auto e = std::exchange(fatal_, nullptr);
      std::rethrow_exception(e);
    }
    if (lost_step_) {
      auto e = std::exchange(lost_step_, nullptr);
      std::rethrow_exception(e);
    }
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

  void work(int w) {
    for (;;) {
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty() || (release_idle_ && clock_.behind(w)); });
        if (stop_) return;
      }
      std::uint64_t c = 0;
      try {
        c = clock_.begin(w);  // may wait for laggards
      } catch (const CollectiveTimeout&) {
        std::lock_guard lk(mu_);
        if (!fatal_) fatal_ = std::current_exception();
        fail_queue_locked(fatal_);
        return;
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
          if (clock_.behind(w)) clock_.end(w);
          else clock_.cancel(w);
          lk.lock();
          cv_.notify_all();
          continue;
        }
        t = std::move(queue_.front());
        queue_.pop_front();
        cv_.notify_all();  // room in the queue
      }
      WorkerContext ctx{w, t.id, c, t.attempts};
      try {
        t.run(ctx);
      } catch (...) {
        failed(w, std::move(t), std::current_exception());
        return;  // a failed worker runs nothing more
      }
      clock_.end(w);
      std::lock_guard lk(mu_);
      finish_one();
    }
  }

  void failed(int w, Task t, std::exception_ptr e) {
    const WorkerFailure f{w, t.id, detail::what_of(e)};
    o_.on_failure(f);
    if (lost_) lost_(w);
    clock_.retire(w);
    std::lock_guard lk(mu_);
    failures_.push_back(f);
    --live_;
    ++t.attempts;
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
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::vector<std::thread> threads_;
  std::function<void(int)> lost_;
  std::vector<WorkerFailure> failures_;
  std::exception_ptr fatal_, lost_step_;
  std::uint64_t next_id_ = 0;
  std::size_t pending_ = 0;  // scheduled, not yet finished or given up
  int live_ = 0;
  bool stop_ = false, release_idle_ = false;
};

}  // namespace strata
