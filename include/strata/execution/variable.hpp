#pragma once
//! Variables under a placement: MirroredVariable keeps one copy per replica,
//! kept identical by identical updates; CentralVariable keeps one copy on the
//! host that replicas read, with gradients reduced onto it.
//!   auto w = strategy.make_variable(strata::Tensor<float>{{784, 128}});
//!   strategy.run([&](auto& ctx) { ...; w.apply_gradient(ctx, grad, sgd); });
//! An update is elementwise, `update(value_slice, grad_slice, offset)` (or
//! without the offset), so that it can be applied to any slice in parallel.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/comm/threads/communicator.hpp>
#include <strata/ps/shard_store.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

namespace detail {
//! The replica's index among those of its process: its copy of a mirrored variable.
template <class Ctx>
std::size_t local_index(Ctx& ctx) {
  if constexpr (requires { ctx.local_replica_id(); }) return static_cast<std::size_t>(ctx.local_replica_id());
  else return static_cast<std::size_t>(ctx.replica_id_in_sync_group());
}

template <class F, class T>
void call_update(F& f, std::span<T> value, std::span<const T> grad, std::size_t offset) {
  if constexpr (std::invocable<F&, std::span<T>, std::span<const T>, std::size_t>)
    f(value, grad, offset);
  else
    f(value, grad);
}

inline void check_grad_size(std::size_t got, std::size_t want, const char* who) {
  if (got != want)
    throw ShapeError(std::string(who) + "::apply_gradient: gradient has " + std::to_string(got) +
                     " elements but the variable " + std::to_string(want));
}
}  // namespace detail

//! One copy of the value per replica.
template <Element T>
class MirroredVariable {
 public:
  MirroredVariable(const Tensor<T>& init, int replicas) : copies_(static_cast<std::size_t>(replicas), init) {}

  //! The copy of the replica running `ctx`.
  template <class Ctx>
  [[nodiscard]] Tensor<T>& local(Ctx& ctx) { return copies_.at(detail::local_index(ctx)); }
  //! The value (replica 0's copy), for use outside Strategy::run.
  [[nodiscard]] const Tensor<T>& value() const { return copies_.at(0); }
  [[nodiscard]] const Tensor<T>& copy(int replica) const { return copies_.at(static_cast<std::size_t>(replica)); }
  [[nodiscard]] Tensor<T>& copy(int replica) { return copies_.at(static_cast<std::size_t>(replica)); }
  [[nodiscard]] int replicas() const noexcept { return static_cast<int>(copies_.size()); }

  //! Reduces `grad` (in place) over the replicas with `op`, then applies
  //! `update` to this replica's copy: every copy sees the same update.
  template <class Ctx, MutableBuffer G, class F, ReduceOperation Op = SumOp>
  void apply_gradient(Ctx& ctx, G&& grad, F&& update, Op op = {}) {
    auto& mine = local(ctx);
    detail::check_grad_size(std::ranges::size(grad), mine.size(), "MirroredVariable");
    ctx.all_reduce(grad, op);
    detail::call_update(update, mine.span(), std::span<const T>(std::ranges::data(grad), mine.size()), 0);
  }

  //! Sets every copy to `v` (same shape). Call outside Strategy::run.
  void assign(const Tensor<T>& v) {
    for (auto& c : copies_) c.copy_from(v);
  }

  //! Throws strata::Error naming the first replica and element whose copy
  //! differs from replica 0's by more than `tol` (exact by default). Call
  //! outside Strategy::run.
  void check_in_sync(Tolerance tol = {0.0, 0.0}) const {
    for (std::size_t r = 1; r < copies_.size(); ++r) {
      std::size_t i = 0;
      while (i < copies_[r].size() && detail::close(copies_[r][i], copies_[0][i], tol)) ++i;
      if (i == copies_[r].size()) continue;
      throw Error("strata: MirroredVariable copies diverged: replica " + std::to_string(r) + " holds " +
                  std::to_string(copies_[r][i]) + " at element " + std::to_string(i) + " where replica 0 holds " +
                  std::to_string(copies_[0][i]));
    }
  }

 private:
  std::vector<Tensor<T>> copies_;
};

//! A single host copy shared by all replicas: the parameter server's
//! ShardStore with one server, one shard per replica (64-byte aligned
//! slices), updated synchronously.
template <Element T>
class CentralVariable {
 public:
  //! `init` on the host, updated by `replicas` replicas (each its own slice).
  explicit CentralVariable(const Tensor<T>& init, int replicas = 1)
      : store_(init, slices(init.size(), replicas), 1), grad_(init.shape()), shape_(init.shape()) {}

  //! The central value; read it freely between updates.
  template <class Ctx>
  [[nodiscard]] const Tensor<T>& local(Ctx&) const noexcept { return store_.unsynchronized_value(); }
  [[nodiscard]] const Tensor<T>& value() const noexcept { return store_.unsynchronized_value(); }
  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  //! Sets the value to `v` (same shape). Call outside Strategy::run.
  void assign(const Tensor<T>& v) {
    if (v.shape() != shape_) throw ShapeError("CentralVariable::assign: the variable is " + shape_.str() + ", the value " + v.shape().str());
    store_.assign(v.span());
  }
  //! The store behind it (one server, a shard per replica).
  [[nodiscard]] const ShardStore<T>& store() const noexcept { return store_; }

  //! Reduces every replica's `grad` onto the central gradient (each replica
  //! reduces a slice), then each replica pushes its slice of it onto its
  //! shard of the central value (`update` applied there); returns when the
  //! whole update is visible to all. No replica's update starts before every
  //! replica has entered the reduction, so reads of the value made before
  //! apply_gradient (to compute the gradient) never see a half-updated
  //! value: no extra barrier needed.
  template <class Ctx, Buffer G, class F, ReduceOperation Op = SumOp>
  void apply_gradient(Ctx& ctx, G&& grad, F&& update, Op op = {}) {
    detail::check_grad_size(std::ranges::size(grad), shape_.elements(), "CentralVariable");
    if (static_cast<std::size_t>(ctx.num_replicas_in_sync()) != store_.num_shards())
      throw Error("CentralVariable::apply_gradient: made for " + std::to_string(store_.num_shards()) +
                  " replicas, updated by " + std::to_string(ctx.num_replicas_in_sync()));
    ctx.reduce_to_one(grad, grad_.span(), 0, op);
    const auto mine = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
    const Range r = store_.elements(mine);
    store_.push(mine, std::span<const T>(grad_.span()).subspan(r.begin, r.size()),
                [&](std::span<T> w, std::span<const T> g, std::size_t offset) { detail::call_update(update, w, g, offset); });
    ctx.barrier();
  }

 private:
  static std::vector<Range> slices(std::size_t n, int replicas) {
    if (replicas < 1) throw Error("CentralVariable: at least one replica, got " + std::to_string(replicas));
    std::vector<Range> out;
    for (int r = 0; r < replicas; ++r)
      out.push_back(detail::aligned_range(n, static_cast<std::size_t>(replicas), static_cast<std::size_t>(r), 64 / sizeof(T)));
    return out;
  }

  ShardStore<T> store_;
  Tensor<T> grad_;
  Shape shape_;
};

}  // namespace strata
