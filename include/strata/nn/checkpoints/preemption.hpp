#pragma once
//! Graceful preemption: while a PreemptionGuard lives (fit makes one when it
//! backs up), the first SIGTERM or SIGINT only sets a flag, so that fit
//! finishes the step it is in, writes a checkpoint and throws nn::Preempted;
//! a second signal ends the process at once (status 128 + signal, as the
//! shell reports a signal). The previous handlers come back with the guard.
//!   strata::nn::PreemptionGuard guard;   ...   if (int s = guard.pending()) { save(); throw Preempted(...); }

#include <atomic>
#include <csignal>

#include <unistd.h>

#include <strata/core/error.hpp>

namespace strata::nn {

class PreemptionGuard {
 public:
  PreemptionGuard() {
    if (active().exchange(true)) return;  // an outer guard (a fit inside a fit's callback) keeps its handlers
    owner_ = true;
    signal_ref().store(0);
    struct sigaction sa {};
    sa.sa_handler = &on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns, the step finishes
    if (::sigaction(SIGTERM, &sa, &old_term_) != 0 || ::sigaction(SIGINT, &sa, &old_int_) != 0) {
      active().store(false);
      throw Error("PreemptionGuard: cannot install the SIGTERM/SIGINT handlers");
    }
  }
  PreemptionGuard(const PreemptionGuard&) = delete;
  PreemptionGuard& operator=(const PreemptionGuard&) = delete;
  ~PreemptionGuard() {
    if (!owner_) return;
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGINT, &old_int_, nullptr);
    signal_ref().store(0);
    active().store(false);
  }

  //! The signal received (SIGTERM or SIGINT), 0 if none.
  [[nodiscard]] static int pending() noexcept { return signal_ref().load(); }

 private:
  static std::atomic<int>& signal_ref() noexcept {
    static std::atomic<int> s{0};
    return s;
  }
  static std::atomic<bool>& active() noexcept {
    static std::atomic<bool> a{false};
    return a;
  }
  static void on_signal(int sig) {
    int expected = 0;
    if (!signal_ref().compare_exchange_strong(expected, sig)) ::_exit(128 + sig);  // the second: at once
  }
  static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need a lock-free flag");

  bool owner_ = false;
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

}  // namespace strata::nn
