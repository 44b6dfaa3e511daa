#pragma once
//! A scheduled step, whatever carries it: where it runs (WorkerContext), its
//! result (RemoteValue, as TensorFlow's ClusterCoordinator returns), and a
//! worker's failure running it (WorkerFailure). The Coordinator makes them,
//! for worker threads and for MPI worker ranks alike.
//!   strata::RemoteValue<int> v = coordinator.schedule([](strata::WorkerContext& w) { return w.worker(); });
//!   int who = v.get();

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <strata/core/error.hpp>

namespace strata {

//! A worker's failure while running a step.
struct WorkerFailure {
  int worker = 0;
  std::uint64_t step = 0;  //!< the schedule() number of the step (from 0)
  std::string what;
};

namespace detail {
//! A transport could not carry a step (a worker rank that never answered,
//! a message MPI refused): no fault of the step or of the worker's code, so
//! the Coordinator does not retry it elsewhere but ends the run with the
//! inner error (join() throws it). Thrown by a transport's step function.
class TransportError : public Error {
 public:
  explicit TransportError(std::exception_ptr inner) : Error(what_of(inner)), inner_(std::move(inner)) {}
  [[nodiscard]] const std::exception_ptr& inner() const noexcept { return inner_; }

 private:
  std::exception_ptr inner_;
};

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
//! When a Coordinator's steps last moved (one started, finished or failed),
//! and its timeout: RemoteValue::get gives up 3 timeouts past it (an attempt
//! waits at most one timeout each for the staleness bound, the step's
//! message to its worker and the answer; past that nothing will end it).
struct StepProgress {
  explicit StepProgress(std::chrono::milliseconds t) : timeout(t) {}
  std::chrono::milliseconds timeout;
  std::atomic<std::chrono::steady_clock::rep> at{std::chrono::steady_clock::now().time_since_epoch().count()};
  void touch() noexcept { at.store(std::chrono::steady_clock::now().time_since_epoch().count()); }
  [[nodiscard]] std::chrono::steady_clock::time_point last() const noexcept {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(at.load()));
  }
};
template <class R>
struct RemoteState {
  using Stored = std::conditional_t<std::is_void_v<R>, std::monostate, R>;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Stored> value;
  std::exception_ptr error;
  bool done = false;
  std::shared_ptr<StepProgress> progress;  // its Coordinator's; null: 60 s from get()
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
  //! Waits for the step; returns its result, or throws what made it fail on
  //! every attempt. Bounded: CollectiveTimeout once no step of its
  //! Coordinator has started, finished or failed for 3 of its timeouts.
  R get() const {
    auto& st = state();
    const auto since = std::chrono::steady_clock::now();
    const std::chrono::milliseconds timeout = st.progress ? st.progress->timeout : std::chrono::milliseconds(60000);
    const auto limit = 3 * timeout;
    std::unique_lock lk(st.mu);
    while (!st.done) {
      const auto deadline = std::max(since, st.progress ? st.progress->last() : since) + limit;
      if (std::chrono::steady_clock::now() >= deadline) {
        throw CollectiveTimeout("strata: RemoteValue::get waited " + std::to_string(limit.count()) +
                                " ms (3 times the timeout) for step " + std::to_string(step_) +
                                "'s result, and no step started, finished or failed meanwhile");
      }
      st.cv.wait_until(lk, deadline);
    }
    if (st.error) std::rethrow_exception(st.error);
    if constexpr (!std::is_void_v<R>) return *st.value;
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

}  // namespace strata
