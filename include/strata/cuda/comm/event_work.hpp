#pragma once
//! EventWork: the strata::Work of a GPU communicator's non-blocking
//! collective (DeviceCommunicator, NcclCommunicator). The collective is
//! already enqueued on the communicator's stream when the Work is made; the
//! Work records an event after it: test() is cudaEventQuery (and asks the
//! watch for failures elsewhere), wait() polls the event under the watch's
//! deadline (cuda/stream.hpp's one bounded host wait) and, past it, the
//! watch aborts the communicator and throws CollectiveTimeout naming the
//! operation.
//!   return strata::Work(std::make_unique<strata::cuda::detail::EventWork>(device, stream, what, watch));

#include <cuda_runtime_api.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/cuda/error.hpp>
#include <strata/cuda/stream.hpp>

namespace strata::cuda::detail {

//! A watch with nothing to ask between polls, only a deadline: past it,
//! `abort(why)` runs and CollectiveTimeout(why) is thrown.
class DeadlineWatch final : public HostWaitWatch {
 public:
  DeadlineWatch(std::string who, std::chrono::milliseconds timeout, std::function<void(const std::string&)> abort)
      : who_(std::move(who)), timeout_(timeout), abort_(std::move(abort)) {}
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept override { return timeout_; }
  void check(const std::string&) override {}
  [[noreturn]] void expire(const std::string& what) override {
    const std::string why = who_ + ": " + what + " did not complete on the GPU within " +
                            std::to_string(timeout_.count()) +
                            " ms (earlier work on its stream does not end); its communicator is aborted";
    if (abort_) abort_(why);
    throw CollectiveTimeout(why);
  }

 private:
  std::string who_;
  std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> abort_;
};

class EventWork final : public strata::detail::PolledWork {
 public:
  //! Records the completion event on `stream` (of GPU `device`) now; `what`
  //! names the operation in errors ("NcclCommunicator rank 0 ...: all_reduce_async(...)").
  EventWork(int device, cudaStream_t stream, std::string what, std::shared_ptr<HostWaitWatch> watch)
      : what_(std::move(what)), watch_(std::move(watch)) {
    DeviceGuard g{device};
    event_.emplace();
    event_->record(stream);
  }

  [[nodiscard]] bool is_completed() const override {
    if (done_) return true;
    // the query's own status only: cudaErrorNotReady is consumed, and only
    // when it is the thread's last error (another call's error stays for its
    // check); a failure is left for test() or wait() to report
    const cudaError_t q = cudaEventQuery(event_->get());
    if (q == cudaErrorNotReady) consume_error(q);
    return q != cudaErrorNotReady;  // completed, or failed (a CUDA error ends it too)
  }

  bool test() override {
    if (done_) return finished();
    try {
      const cudaError_t q = cudaEventQuery(event_->get());
      if (q == cudaErrorNotReady) {
        consume_error(q);
        watch_->check(what_);
        return false;
      }
      check(q, "cudaEventQuery");
    } catch (...) {
      error_ = std::current_exception();
    }
    done_ = true;
    return finished();
  }

  void wait() override {
    if (done_) {
      finished();
      return;
    }
    try {
      poll_until_done([&] { return cudaEventQuery(event_->get()); }, {watch_.get()}, what_, "cudaEventQuery");
    } catch (...) {
      error_ = std::current_exception();
    }
    done_ = true;
    finished();
  }

 private:
  bool finished() const {
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  std::string what_;
  std::shared_ptr<HostWaitWatch> watch_;
  std::optional<Event> event_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace strata::cuda::detail
