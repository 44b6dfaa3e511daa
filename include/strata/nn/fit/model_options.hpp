#pragma once
//! The options and small types of a model's user-facing calls (Sequential's
//! compile, fit, evaluate).
//!   model.compile(opt, loss, {strata::nn::Accuracy{}}, {.seed = 7});
//!   model.fit(data, {.epochs = 5, .verbose = strata::nn::Verbosity::Silent});

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/program/node.hpp>  // Input
#include <strata/nn/program/metrics.hpp>
#include <strata/nn/fit/progress.hpp>
#include <strata/tensor/shape.hpp>

namespace strata::nn {

//! Metrics for compile: `{strata::nn::Accuracy{}, ...}`.
class MetricList {
 public:
  MetricList() = default;
  template <std::derived_from<Metric>... M>
  MetricList(M... m) {  // NOLINT: implicit, for brace lists
    (items_.push_back(std::make_unique<M>(std::move(m))), ...);
  }
  MetricList(MetricList&&) = default;
  MetricList& operator=(MetricList&&) = default;
  std::vector<std::unique_ptr<Metric>>& items() noexcept { return items_; }

 private:
  std::vector<std::unique_ptr<Metric>> items_;
};

struct CompileOptions {
  std::uint64_t seed = 0;  //!< keys weight initialization and dropout; fixed by default, so runs repeat
  //! Steps fit, evaluate and predict run as one execution (Keras' option):
  //! the synchronous strategies' replicas run them in one go, each taking
  //! the next batch itself, so the caller wakes them once per N steps; the
  //! batch callbacks, progress and BackupAndRestore's step checks run once
  //! per execution (on_batch_begin with its first batch, on_batch_end with
  //! its last: Callback::batches_ended() says how many it ended). The same
  //! weights, bit for bit, as 1; a stop (a callback, a signal) waits for
  //! the execution's end.
  std::size_t steps_per_execution = 1;
};

struct FitOptions {
  int epochs = 1;
  Verbosity verbose = Verbosity::Auto;
  std::vector<Callback*> callbacks = {};
  std::size_t steps_per_epoch = 0;  //!< 0: until the dataset ends
  std::FILE* out = stdout;          //!< where progress goes
  //! Checks each step's reduced gradient for NaN and infinity (synchronous
  //! strategies; the asynchronous parameter server does not check): such a
  //! step is skipped on every replica (no variable, optimizer state or step
  //! count changes) and counted in the logs' "skipped_steps". false lets
  //! non-finite gradients reach the weights.
  bool check_finite = true;
  //! Consecutive skipped steps that stop fit with strata::NonFiniteError
  //! naming the step (0: never stop).
  std::size_t max_bad_steps = 10;
};

struct EvaluateOptions {
  Verbosity verbose = Verbosity::Silent;
  std::FILE* out = stdout;
};

}  // namespace strata::nn
