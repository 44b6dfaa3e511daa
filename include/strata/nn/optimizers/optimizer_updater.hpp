#pragma once
//! OptimizerUpdater: a Sequential's optimizer as the executors' Updater
//! (execution/program.hpp), with its state for one slice of the parameters
//! in the memory of the compute it updates on; the update eager or inside a
//! captured step (apply_at), and the state copied to and from the host.
//!   strata::nn::detail::OptimizerUpdater up{strata::nn::Adam{1e-3}, n, compute};
//!   up.apply(w, g, /*offset=*/0, /*step=*/it);

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/trace.hpp>
#include <strata/nn/optimizers/optimizer.hpp>
#include <strata/execution/program.hpp>

namespace strata::nn::detail {

//! The optimizer with its state for a slice of the parameters.
class OptimizerUpdater final : public Updater {
 public:
  OptimizerUpdater(const Optimizer& o, std::size_t n, kernels::Compute& c = kernels::host_compute())
      : opt_(o.clone()), state_(o.make_state(n, c)) {}
  void apply(std::span<float> w, std::span<const float> g, std::size_t offset, std::int64_t step) override {
    trace::Span span{"update", trace::Category::Update, {{"elements", w.size()}, {"step", step}}};
    opt_->apply(w, g, state_, offset, step);
  }
  void apply_at(std::span<float> w, std::span<const float> g, std::size_t offset,
                const kernels::DeviceStep& d) override {
    trace::Span span{"update", trace::Category::Update, {{"elements", w.size()}}};
    opt_->apply_at(w, g, state_, offset, d);
  }
  [[nodiscard]] float step_rate(std::int64_t step) const override { return opt_->step_rate(step); }
  void prepare_at(std::int64_t step, std::size_t count) override { opt_->prepare_steps(state_, step, count); }
  [[nodiscard]] float global_clipnorm() const override { return opt_->global_clipnorm(); }
  std::vector<Tensor<float>> state() override {
    std::vector<Tensor<float>> out;
    for (auto& slot : state_.slots) {
      Tensor<float> t{Shape{slot.size()}};
      state_.compute->download(t.data(), slot.data(), t.bytes());
      out.push_back(std::move(t));
    }
    if (!out.empty()) state_.compute->synchronize();
    return out;
  }
  void set_state(std::span<const Tensor<float>> slots) override {
    if (slots.size() != state_.slots.size())
      throw ShapeError(opt_->name() + " keeps " + std::to_string(state_.slots.size()) + " state slots, got " +
                       std::to_string(slots.size()));
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (slots[i].size() != state_.slots[i].size())
        throw ShapeError(opt_->name() + " state slot " + std::to_string(i) + " holds " +
                         std::to_string(state_.slots[i].size()) + " elements, got " + std::to_string(slots[i].size()));
    for (std::size_t i = 0; i < slots.size(); ++i)
      state_.compute->upload(state_.slots[i].data(), slots[i].data(), slots[i].bytes());
    state_.compute->synchronize();
  }

 private:
  std::unique_ptr<Optimizer> opt_;
  OptimizerState state_;
};

}  // namespace strata::nn::detail
