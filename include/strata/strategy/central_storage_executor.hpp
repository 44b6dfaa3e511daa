#pragma once
//! The executor of CentralStorage placement: one host copy of the
//! variables, read by every replica; gradients are reduced onto one central
//! gradient and each replica applies the update to its slice of the central
//! copy (with its slice of the one optimizer state).
//!   strata::CentralStorageStrategy s{strata::cpu_replicas(4)};
//!   auto model = s.scope([] { return strata::nn::Sequential{...}; });   // trains through this executor

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <strata/policy/placement.hpp>
#include <strata/strategy/sync_executor.hpp>

namespace strata::detail {

template <class S>
class CentralStorageExecutor final : public SyncExecutor<S, CentralStorageExecutor<S>> {
  using Base = SyncExecutor<S, CentralStorageExecutor<S>>;
  friend Base;

 public:
  using Base::Base;

  [[nodiscard]] const Tensor<float>& value() const override { return var_->value(); }
  void assign(const Tensor<float>& v) override { var_->assign(v); }
  void reset_optimizer() override {
    if (var_ && this->program_.compiled()) updater_ = this->program_.make_updater(this->program_.num_params());
  }
  std::vector<Tensor<float>> optimizer_state() override { return updater_ ? updater_->state() : std::vector<Tensor<float>>{}; }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (!updater_) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    updater_->set_state(slots);
  }

 private:
  void place_values(const Tensor<float>& init, std::size_t local) { var_.emplace(init, static_cast<int>(local)); }
  std::span<const float> replica_value(std::size_t) { return var_->value().span(); }

  template <class Ctx>
  void apply(Ctx& ctx, std::size_t r, std::int64_t it) {
    var_->apply_gradient(ctx, this->grads_[r], [&](std::span<float> w, std::span<const float> g, std::size_t off) {
      if (this->finite_gradient(ctx, r, g)) updater_->apply(w, g, off, it);  // g: this replica's slice of the sum
    });
  }

  std::optional<CentralVariable<float>> var_;
  std::unique_ptr<Updater> updater_;
};

template <>
struct ExecutorFor<CentralStorage> {
  template <class S>
  static std::unique_ptr<Executor> make(S& s, ModelProgram& program) {
    return std::make_unique<CentralStorageExecutor<S>>(s, program);
  }
};

}  // namespace strata::detail
