#pragma once
//! What a model keeps for a custom training loop (Sequential::train_step):
//! the batch of one step handed to the executor as a pass of one batch (so
//! a custom loop's step is fit's step: the same split, reduction and
//! update, written once in the executors), the gradient hook's type, and
//! the running sums of the steps since reset_metrics.
//!   for (const auto& batch : strategy.distribute(train)) logs = model.train_step(batch, clip);

#include <cstddef>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include <strata/core/error.hpp>
#include <strata/nn/program/data_pass.hpp>
#include <strata/strategy/distributed.hpp>
#include <strata/execution/program.hpp>

namespace strata::nn {

//! A custom loop's look at each replica's gradient between its backward
//! and the strategy's reduction (strata::ReplicaGradient: host memory, may
//! be changed). Runs on the replicas' threads, concurrently.
//!   nn::GradientHook clip = [](strata::ReplicaGradient& g) { for (float& v : g.values) v = std::clamp(v, -1.f, 1.f); };
using GradientHook = std::function<void(ReplicaGradient&)>;

namespace detail {

template <class B>
struct is_distributed_batch : std::false_type {};
template <class E>
struct is_distributed_batch<DistributedBatch<E>> : std::true_type {};

//! The element of a custom loop's batch: a DistributedBatch's (of `strategy`,
//! the model's: another's is an error), or the batch itself.
template <class B>
const auto& element_of(const B& batch, const AnyStrategy* strategy) {
  if constexpr (is_distributed_batch<B>::value) {
    if (batch.strategy != strategy)
      throw Error("Sequential::train_step: the batch was distributed by another strategy than the one this model "
                  "was made under; make the model inside that strategy's scope");
    return batch.global();
  } else {
    return batch;
  }
}
template <class B>
bool per_worker_batch(const B& batch) {
  if constexpr (is_distributed_batch<B>::value) return batch.per_worker;
  else return false;
}

//! An iterator over one element (what a model's data pass reads).
template <class E>
struct OneElement {
  const E* e;
  std::optional<E> next() {
    if (!e) return std::nullopt;
    std::optional<E> out{*e};
    e = nullptr;
    return out;
  }
};
template <class E>
OneElement(const E*) -> OneElement<E>;  // clang 14 deduces no aggregate's arguments

//! The custom loop's running state: its steps' sums since the last reset,
//! and the finiteness policy's count (fit's default: skip a step whose
//! reduced gradient holds a NaN or an infinity, stop after 10 in a row).
struct CustomLoopState {
  PassTotals totals;
  Pass::FiniteCheck finite;

  //! Adds one step's sums (every worker's).
  void add(const PassTotals& t) {
    totals.metrics.resize(t.metrics.size(), 0.0);
    totals.loss += t.loss;
    totals.local += t.local;
    totals.samples += t.samples;
    for (std::size_t m = 0; m < t.metrics.size(); ++m) totals.metrics[m] += t.metrics[m];
  }
  void reset() { totals = PassTotals{}; }
};

//! Makes `pass` (a model's pass over one batch) a custom loop's step: one
//! step, the loop's finiteness count, `hook` on each replica's gradient. An
//! executor that would not call the hook is refused before the step runs.
inline void custom_step(FnPass& pass, GradientHook hook, CustomLoopState& loop) {
  pass.max_steps = 1;
  pass.custom_step = true;
  pass.finite = &loop.finite;
  if (hook)
    pass.next_fn = [&pass, next = std::move(pass.next_fn)]() -> std::optional<Batch> {
      if (!pass.runs_gradient_hook)
        throw Error("Sequential::train_step: this strategy's executor does not call a custom loop's gradient hook "
                    "(it has no step between a replica's backward and the reduction); call train_step without a "
                    "hook, or use fit");
      return next();
    };
  pass.gradient_hook = std::move(hook);
}

}  // namespace detail
}  // namespace strata::nn
