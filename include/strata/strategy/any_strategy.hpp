#pragma once
//! A strategy seen without its type: what model code (strata/nn) needs to
//! train under any strategy without being a template over it, as
//! `tf.distribute.get_strategy()` returns a base class. Every Strategy<...>
//! offers one through `any()`; a strategy scope records it.
//!   strata::AnyStrategy& s = strata::current_strategy();
//!   s.run([&](strata::AnyReplicaContext& ctx) { ctx.all_reduce(grad, strata::Sum); });

#include <concepts>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include <strata/comm/reduce_op.hpp>
#include <strata/policy/placement.hpp>
#include <strata/policy/sync.hpp>
#include <strata/strategy/executor.hpp>

namespace strata {

//! The collectives of one replica, type-erased. Sums only: that is what
//! gradient aggregation needs; the typed ReplicaContext offers the rest.
class AnyReplicaContext {
 public:
  virtual ~AnyReplicaContext() = default;
  [[nodiscard]] virtual int replica_id_in_sync_group() const noexcept = 0;
  [[nodiscard]] virtual int num_replicas_in_sync() const noexcept = 0;
  //! This replica's index among the replicas of its own process (equal to
  //! replica_id_in_sync_group() except across workers).
  [[nodiscard]] virtual int local_replica_id() const noexcept { return replica_id_in_sync_group(); }
  //! In-place sum over the replicas with the strategy's all-reduce algorithm.
  virtual void all_reduce(std::span<float> data, SumOp) = 0;
  virtual void all_reduce(std::span<double> data, SumOp) = 0;
  //! Sum of every replica's `in` into `out` on `root` (others' `out` is untouched).
  virtual void reduce_to_one(std::span<const float> in, std::span<float> out, int root, SumOp) = 0;
  virtual void barrier() = 0;
};

//! A strategy, type-erased: what a model holds.
class AnyStrategy {
 public:
  virtual ~AnyStrategy() = default;
  [[nodiscard]] virtual PlacementKind placement() const noexcept = 0;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  [[nodiscard]] virtual int num_replicas_in_sync() const noexcept = 0;
  //! Runs `fn` on every replica of this process; errors as Strategy::run (ReplicaError).
  virtual void run(const std::function<void(AnyReplicaContext&)>& fn) = 0;
  //! The executor that trains `program` under this strategy (see
  //! strategy/executor.hpp); it keeps references to both.
  [[nodiscard]] virtual std::unique_ptr<Executor> make_executor(ModelProgram& program) = 0;
  //! The processes of a synchronous multi-worker job (1 otherwise), and
  //! this one's index (0 is the chief, the one that prints).
  [[nodiscard]] virtual int num_workers() const noexcept { return 1; }
  [[nodiscard]] virtual int worker_index() const noexcept { return 0; }
};

namespace detail {
template <class Ctx>
class ErasedReplicaContext final : public AnyReplicaContext {
 public:
  explicit ErasedReplicaContext(Ctx& ctx) : ctx_(ctx) {}
  int replica_id_in_sync_group() const noexcept override { return ctx_.replica_id_in_sync_group(); }
  int num_replicas_in_sync() const noexcept override { return ctx_.num_replicas_in_sync(); }
  int local_replica_id() const noexcept override {
    if constexpr (requires { ctx_.local_replica_id(); }) return ctx_.local_replica_id();
    else return ctx_.replica_id_in_sync_group();
  }
  void all_reduce(std::span<float> d, SumOp op) override { ctx_.all_reduce(d, op); }
  void all_reduce(std::span<double> d, SumOp op) override { ctx_.all_reduce(d, op); }
  void reduce_to_one(std::span<const float> in, std::span<float> out, int root, SumOp op) override {
    ctx_.reduce_to_one(in, out, root, op);
  }
  void barrier() override { ctx_.barrier(); }

 private:
  Ctx& ctx_;
};

//! A strategy's name: its own `name` where it has one, else its placement's.
template <class S>
constexpr std::string_view strategy_name() noexcept {
  if constexpr (requires { S::name; }) return S::name;
  else return S::placement_policy::name;
}

template <class S>
class ErasedStrategy final : public AnyStrategy {
 public:
  explicit ErasedStrategy(S& s) : s_(s) {}
  PlacementKind placement() const noexcept override { return S::placement_policy::kind; }
  std::string_view name() const noexcept override { return strategy_name<S>(); }
  int num_replicas_in_sync() const noexcept override { return s_.num_replicas_in_sync(); }
  void run(const std::function<void(AnyReplicaContext&)>& fn) override {
    s_.run([&](auto& ctx) {
      ErasedReplicaContext<std::remove_reference_t<decltype(ctx)>> erased(ctx);
      fn(erased);
    });
  }
  std::unique_ptr<Executor> make_executor(ModelProgram& program) override { return detail::make_executor(s_, program); }
  //! The synchronous peers: a parameter server's workers are not (they answer to its chief).
  int num_workers() const noexcept override {
    if constexpr (std::same_as<typename S::sync_policy, Synchronous>) return s_.num_workers();
    else return 1;
  }
  int worker_index() const noexcept override { return s_.worker_index(); }

 private:
  S& s_;
};
}  // namespace detail

}  // namespace strata
