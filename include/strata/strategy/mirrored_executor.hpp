#pragma once
//! The executor of Mirrored (and OneDevice) placement: every local replica
//! keeps a copy of the variables; gradients are all-reduced (summed) and
//! every copy gets the same update. With the sharded update (ZeRO stage 1,
//! which TensorFlow's MirroredStrategy does not have) the gradients are
//! reduce-scattered instead, each replica updates only its 1/p slice with
//! its 1/p of the optimizer state, and the slices are all-gathered into
//! every copy: the same sums, so bitwise the same weights as the unsharded
//! update with the direct all-reduce, and optimizer state per replica
//! divided by p.
//!   strata::MirroredStrategy s{strata::cpu_replicas(4)};
//!   s.executor_options().sharded_update = strata::ShardedUpdate::Off;   // before making the model

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/policy/placement.hpp>
#include <strata/strategy/device_compute.hpp>
#include <strata/strategy/device_executor.hpp>
#include <strata/strategy/device_mirrored_executor.hpp>
#include <strata/strategy/executor_options.hpp>
#include <strata/strategy/sync_executor.hpp>

namespace strata {

namespace detail {

//! One replica's share of the sharded update: reduce-scatter `grad` into
//! `shard` (this replica's slice `mine` of the sum), `update(values, grad)`
//! on that slice of `values`, all-gather every replica's updated slice into
//! `values`. Collective over ctx's replicas; `shard` holds mine.size().
//!   sharded_update(ctx, w, g, shard, shard_range(n, p, r), [&](auto w, auto g) { adam.apply(w, g, st, 0, it); });
template <class Ctx, class Update>
void sharded_update(Ctx& ctx, std::span<float> values, std::span<const float> grad, std::span<float> shard, Range mine,
                    Update&& update) {
  ctx.reduce_scatter(grad, shard, Sum);
  update(values.subspan(mine.begin, mine.size()), std::span<const float>(shard));
  // all-gather from a buffer no one writes meanwhile (not from the copies being written)
  std::copy_n(values.data() + mine.begin, mine.size(), shard.data());
  ctx.all_gather(std::span<const float>(shard), values);
}

template <class S>
class MirroredExecutor final : public SyncExecutor<S, MirroredExecutor<S>> {
  using Base = SyncExecutor<S, MirroredExecutor<S>>;
  friend Base;

 public:
  MirroredExecutor(S& s, ModelProgram& program, ExecutorOptions o) : Base(s, program), opts_(o) {}

  [[nodiscard]] const Tensor<float>& value() const override { return vars_->value(); }
  void assign(const Tensor<float>& v) override { vars_->assign(v); }
  std::vector<Tensor<float>> optimizer_state() override {
    if (updaters_.empty()) return {};
    if (!sharded_) return updaters_.front()->state();  // every copy's is the same
    return join_state_slices(this->program_.num_params(), updaters_.size(),
                             [&](std::size_t r) { return updaters_[r]->state(); });
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (updaters_.empty()) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    check_state_slots(slots, this->program_.num_params());
    for (std::size_t r = 0; r < updaters_.size(); ++r) {
      if (sharded_) updaters_[r]->set_state(state_slice(slots, mine(r)));
      else updaters_[r]->set_state(slots);
    }
  }
  //! Whether the update is sharded (decided when the variables are placed).
  [[nodiscard]] bool sharded() const noexcept { return sharded_; }

  void reset_optimizer() override {
    updaters_.clear();
    if (!vars_ || !this->program_.compiled()) return;
    for (std::size_t r = 0; r < shards(); ++r)
      updaters_.push_back(this->program_.make_updater(sharded_ ? mine(r).size() : this->program_.num_params()));
  }

 private:
  static constexpr bool can_shard = requires(typename S::context_type& c, std::span<const float> in, std::span<float> out) {
    c.reduce_scatter(in, out, Sum);
    c.all_gather(in, out);
  };

  void place_values(const Tensor<float>& init, std::size_t local) {
    vars_.emplace(init, static_cast<int>(local));
    sharded_ = can_shard && shards_update(opts_.sharded_update, local);
    shards_.clear();
    if (sharded_)
      for (std::size_t r = 0; r < local; ++r) shards_.emplace_back(Shape{mine(r).size()});
  }
  std::span<const float> replica_value(std::size_t r) { return vars_->copy(static_cast<int>(r)).span(); }
  //! The replicas sharing the update, and replica r's slice of it (the reduce-scatter's shard).
  std::size_t shards() const { return static_cast<std::size_t>(vars_->replicas()); }
  Range mine(std::size_t r) const { return shard_range(this->program_.num_params(), shards(), r); }

  template <class Ctx>
  void apply(Ctx& ctx, std::size_t r, std::int64_t it) {
    std::span<float> w = vars_->copy(static_cast<int>(r)).span();
    std::span<float> g = this->grads_[r].span();
    if constexpr (can_shard) {
      if (sharded_) {
        // a skipped update leaves every slice as it was, so the all-gather changes nothing
        sharded_update(ctx, w, g, shards_[r].span(), mine(r), [&](std::span<float> ws, std::span<const float> gs) {
          if (this->finite_gradient(ctx, r, gs)) updaters_[r]->apply(ws, gs, 0, it);
        });
        return;
      }
    }
    ctx.all_reduce(g, Sum);
    if (this->finite_gradient(ctx, r, std::span<const float>(g).subspan(mine(r).begin, mine(r).size())))
      updaters_[r]->apply(w, g, 0, it);
  }

  ExecutorOptions opts_;
  std::optional<MirroredVariable<float>> vars_;
  std::vector<std::unique_ptr<Updater>> updaters_;
  std::vector<Tensor<float>> shards_;  // per replica: its reduced gradient slice, then its updated values
  bool sharded_ = false;
};

//! Mirrored: CPU replicas share the host's memory (MirroredExecutor); GPU
//! replicas each keep their copy on their device (DeviceMirroredExecutor),
//! in one process and across workers.
template <>
struct ExecutorFor<Mirrored> {
  template <class S>
  static std::unique_ptr<Executor> make(S& s, ModelProgram& program) {
    if (s.devices().front().is_gpu())
      return std::make_unique<DeviceMirroredExecutor<S>>(s, program, s.executor_options());
    return std::make_unique<MirroredExecutor<S>>(s, program, s.executor_options());
  }
};
//! One device: on a CPU, a mirrored executor of one replica; on a GPU, the
//! device executor (everything in the GPU's memory, strategy/device_executor.hpp).
template <>
struct ExecutorFor<OneDevice> {
  template <class S>
  static std::unique_ptr<Executor> make(S& s, ModelProgram& program) {
    const Device& d = s.devices().front();
    if (d.is_gpu()) return std::make_unique<DeviceExecutor>(program, make_compute(d, s.executor_options().matmul));
    return ExecutorFor<Mirrored>::make(s, program);
  }
};

}  // namespace detail
}  // namespace strata
