#pragma once
//! A strategy seen without its type: what model code (strata/nn) needs to
//! train under any strategy without being a template over it, as
//! `tf.distribute.get_strategy()` returns a base class. Every Strategy<...>
//! offers one through `any()`; a strategy scope records it.
//!   strata::AnyStrategy& s = strata::current_strategy();
//!   s.run([&](strata::AnyReplicaContext& ctx) { ctx.all_reduce(grad, strata::Sum); });

#include <functional>
#include <span>
#include <string_view>
#include <type_traits>

#include <strata/comm/reduce_op.hpp>
#include <strata/policy/placement.hpp>

namespace strata {

//! The collectives of one replica, type-erased. Sums only: that is what
//! gradient aggregation needs; the typed ReplicaContext offers the rest.
class AnyReplicaContext {
 public:
  virtual ~AnyReplicaContext() = default;
  [[nodiscard]] virtual int replica_id_in_sync_group() const noexcept = 0;
  [[nodiscard]] virtual int num_replicas_in_sync() const noexcept = 0;
  //! In-place sum over the replicas with the strategy's all-reduce algorithm.
  virtual void all_reduce(std::span<float> data, SumOp) = 0;
  virtual void all_reduce(std::span<double> data, SumOp) = 0;
  //! Sum of every replica's `in` into `out` on `root` (others' `out` is untouched).
  virtual void reduce_to_one(std::span<const float> in, std::span<float> out, int root, SumOp) = 0;
  virtual void barrier() = 0;
};

//! A strategy, type-erased.
class AnyStrategy {
 public:
  virtual ~AnyStrategy() = default;
  [[nodiscard]] virtual PlacementKind placement() const noexcept = 0;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  [[nodiscard]] virtual int num_replicas_in_sync() const noexcept = 0;
  //! Runs `fn` on every replica; errors as Strategy::run (ReplicaError).
  virtual void run(const std::function<void(AnyReplicaContext&)>& fn) = 0;
};

namespace detail {
template <class Ctx>
class ErasedReplicaContext final : public AnyReplicaContext {
 public:
  explicit ErasedReplicaContext(Ctx& ctx) : ctx_(ctx) {}
  int replica_id_in_sync_group() const noexcept override { return ctx_.replica_id_in_sync_group(); }
  int num_replicas_in_sync() const noexcept override { return ctx_.num_replicas_in_sync(); }
  void all_reduce(std::span<float> d, SumOp op) override { ctx_.all_reduce(d, op); }
  void all_reduce(std::span<double> d, SumOp op) override { ctx_.all_reduce(d, op); }
  void reduce_to_one(std::span<const float> in, std::span<float> out, int root, SumOp op) override {
    ctx_.reduce_to_one(in, out, root, op);
  }
  void barrier() override { ctx_.barrier(); }

 private:
  Ctx& ctx_;
};

template <class S>
class ErasedStrategy final : public AnyStrategy {
 public:
  explicit ErasedStrategy(S& s) : s_(s) {}
  PlacementKind placement() const noexcept override { return S::placement_policy::kind; }
  std::string_view name() const noexcept override { return S::placement_policy::name; }
  int num_replicas_in_sync() const noexcept override { return s_.num_replicas_in_sync(); }
  void run(const std::function<void(AnyReplicaContext&)>& fn) override {
    s_.run([&](auto& ctx) {
      ErasedReplicaContext<std::remove_reference_t<decltype(ctx)>> erased(ctx);
      fn(erased);
    });
  }

 private:
  S& s_;
};
}  // namespace detail

}  // namespace strata
