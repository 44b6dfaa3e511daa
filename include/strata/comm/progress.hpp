#pragma once
//! One rank's progress thread: the operations of one rank of a communicator
//! (one replica of a thread team, one MPI communicator of a process) run in
//! the order they were issued, the non-blocking ones on this thread (the
//! design of c10d's Gloo and MPI process groups: a worker thread draining a
//! FIFO queue). A blocking operation issued while non-blocking ones are
//! queued or running goes through the same queue and is waited for; with
//! nothing pending it runs on the caller's thread, as it always did (no
//! thread is started until the first non-blocking operation).
//!   detail::ProgressQueue q;  q.configure("replica 1", timeout, cancel);
//!   strata::Work w = q.submit([&] { return describe(); }, [=] { reduce(); });
//!   q.run([&] { reduce_now(); }, [&] { return describe(); });  // in order after w
//! One thread issues a rank's operations (the replica's, the MPI
//! communicator's owner); the queue orders them.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <strata/comm/work.hpp>
#include <strata/core/concepts.hpp>
#include <strata/core/trace.hpp>

namespace strata::detail {

//! "all_reduce(float, 1000 elements)": an operation, for a Work's messages.
template <class T>
std::string describe_call(const char* call, std::size_t n) {
  return std::string(call) + "(" + std::string(dtype_name<T>()) + ", " + std::to_string(n) + " elements)";
}

//! describe_call's arguments, described only when asked; bytes() for the trace.
template <class T>
struct Described {
  const char* call;
  std::size_t n;
  std::string operator()() const { return describe_call<T>(call, n); }
  [[nodiscard]] std::size_t bytes() const noexcept { return n * sizeof(T); }
};
//! The bytes a description names (0 for one without: a barrier).
template <class D>
std::size_t described_bytes(const D& d) noexcept {
  if constexpr (requires { d.bytes(); }) return d.bytes();
  else return 0;
}

class ProgressQueue {
 public:
  ProgressQueue() = default;
  ProgressQueue(const ProgressQueue&) = delete;
  ProgressQueue& operator=(const ProgressQueue&) = delete;
  //! Runs what is still queued (each operation is bounded), then ends the thread.
  ~ProgressQueue() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  //! `who` names the rank in messages ("replica 1"); `per_op` is the
  //! communicator's deadline for one operation; `cancel(why)` ends the
  //! communicator's collectives early (may be empty). Before any operation.
  void configure(std::string who, std::chrono::milliseconds per_op,
                 std::function<void(const std::string&)> cancel) {
    who_ = std::move(who);
    per_op_ = per_op;
    cancel_ = std::move(cancel);
  }

  //! Queues `op` behind every operation issued before it and returns its
  //! Work; `what()` describes it ("all_reduce(float, 10 elements)"). The
  //! Work's wait is bounded by the deadline of each operation ahead and of
  //! its own, plus a margin of one more deadline and a second.
  template <class What>
  Work submit(What what, std::function<void()> op) {
    if (on_progress_thread()) {  // issued from inside an operation of this rank: run it now, in order
      std::exception_ptr e;
      try {
        op();
      } catch (...) {
        e = std::current_exception();
      }
      auto s = std::make_shared<WorkState>(what() + " on " + who_, per_op_, nullptr);
      s->finish(std::move(e));
      return Work(std::move(s));
    }
    std::unique_lock lk(mu_);
    const std::size_t ahead = queue_.size() + (running_ ? 1 : 0);
    const auto bound = static_cast<std::chrono::steady_clock::duration>(per_op_) * static_cast<long>(ahead + 2) +
                       std::chrono::seconds(1);
    auto s = std::make_shared<WorkState>(what() + " on " + who_, bound, cancel_);
    queue_.push_back(Item{std::move(op), s});
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { loop(); });
      started_.store(true, std::memory_order_release);
    }
    lk.unlock();
    cv_.notify_one();
    return Work(std::move(s));
  }

  //! Runs `op` in issue order and returns when it has: on the caller's
  //! thread when nothing is queued or running, else queued and waited for
  //! (its error rethrown). `what()` is called only in the second case.
  template <class Op, class What>
  void run(Op&& op, What what) {
    if (!started_.load(std::memory_order_acquire) || on_progress_thread() || idle()) {
      op();
      return;
    }
    submit(what, std::function<void()>(std::forward<Op>(op))).wait();
  }

  //! Nothing queued nor running (and everything that ran happened before this returns true).
  [[nodiscard]] bool idle() {
    if (!started_.load(std::memory_order_acquire)) return true;
    std::lock_guard lk(mu_);
    return queue_.empty() && !running_;
  }

  //! Waits (bounded, as Work::wait) until every operation issued so far has
  //! ended; their errors stay with their Works. A no-op on the progress
  //! thread itself and before any non-blocking operation.
  void drain() noexcept {
    if (!started_.load(std::memory_order_acquire) || on_progress_thread() || idle()) return;
    try {
      Work w = submit([] { return std::string("the wait for earlier operations"); }, [] {});
      w.wait();
    } catch (...) {  // a marker cannot fail; a bound that passed has cancelled the rest
    }
  }

 private:
  struct Item {
    std::function<void()> op;
    std::shared_ptr<WorkState> state;
  };

  //! The queue whose progress thread this is (null on other threads).
  static const ProgressQueue*& current() noexcept {
    thread_local const ProgressQueue* q = nullptr;
    return q;
  }
  [[nodiscard]] bool on_progress_thread() const noexcept { return current() == this; }

  void loop() {
    current() = this;
    trace::name_thread(who_ + " progress");  // its track in a trace (core/trace.hpp)
    for (;;) {
      Item item;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and everything ran
        item = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
      }
      std::exception_ptr e;
      try {
        item.op();
      } catch (...) {
        e = std::current_exception();
      }
      item.op = nullptr;  // what it captured goes before anyone is told it ended
      {
        std::lock_guard lk(mu_);
        running_ = false;
      }
      item.state->finish(std::move(e));
    }
  }

  std::string who_ = "this rank";
  std::chrono::milliseconds per_op_{std::chrono::minutes(2)};
  std::function<void(const std::string&)> cancel_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // guarded by mu_
  bool running_ = false;    // guarded by mu_: the progress thread runs an item
  bool stop_ = false;       // guarded by mu_
  std::thread thread_;      // started by the issuing thread, under mu_
  std::atomic<bool> started_{false};
};

}  // namespace strata::detail
