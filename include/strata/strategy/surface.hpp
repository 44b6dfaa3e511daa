#pragma once
//! What every strategy offers the same way, written once: its scope, its
//! type-erased view (what models hold), marking datasets for distribution,
//! per-replica results, and the worker facts of one process. Strategy<...>,
//! MultiWorkerMirroredStrategy and ParameterServerStrategy derive from it
//! (CRTP) and add what their placement changes (run, reduce, make_variable;
//! distribute across workers).
//!   auto model = strategy.scope([] { return strata::nn::Sequential{...}; });
//!   model.fit(strategy.distribute(train), {.epochs = 5});

#include <concepts>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/strategy/any_strategy.hpp>
#include <strata/strategy/distributed.hpp>
#include <strata/parallel/data/mirrored_executor.hpp>
#include <strata/strategy/per_replica.hpp>
#include <strata/strategy/scope.hpp>

namespace strata::detail {

template <class Derived>
class StrategySurface {
 public:
  //! Runs `fn()` with this strategy as the current one (models made there train under it).
  template <std::invocable F>
  decltype(auto) scope(F&& fn) {
    ScopeGuard g{{strategy_name<Derived>(), self().num_replicas_in_sync(), &any_}};
    return std::forward<F>(fn)();
  }

  //! This strategy seen without its type (what strata/nn models hold).
  [[nodiscard]] AnyStrategy& any() noexcept { return any_; }

  //! Marks `dataset` for distribution: a model's fit/evaluate/predict
  //! splits each global batch of it over the replicas (contiguous, balanced
  //! rows; a batch smaller than the replica count leaves some replicas an
  //! empty batch). The per-example loss is scaled by the global batch size,
  //! so p replicas train as one would on the same global batch.
  template <class D>
  [[nodiscard]] Distributed<std::remove_cvref_t<D>> distribute(D&& dataset) {
    return {std::forward<D>(dataset), &any_};
  }

  //! The per-replica values of this process, indexed by local replica id.
  template <class T>
  const std::vector<T>& local_results(const PerReplica<T>& v) const { return v.values(); }

  //! Processes taking part and this one's index (one process: 1 and 0).
  [[nodiscard]] int num_workers() const noexcept { return 1; }
  [[nodiscard]] int worker_index() const noexcept { return 0; }
  //! The worker that prints and saves (worker 0).
  [[nodiscard]] bool is_chief() const noexcept { return self().worker_index() == 0; }

  //! How this strategy's executor trains models (set before making them).
  [[nodiscard]] ExecutorOptions& executor_options() noexcept { return exec_; }

 protected:
  StrategySurface() = default;
  StrategySurface(const StrategySurface&) = delete;
  StrategySurface& operator=(const StrategySurface&) = delete;

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
  const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }

  ExecutorOptions exec_;
  ErasedStrategy<Derived> any_{static_cast<Derived&>(*this)};
};

}  // namespace strata::detail
