#pragma once
//! The optimizer interface. An update is elementwise, so it can be applied to
//! any slice of the flat parameter vector: under CentralStorage each replica
//! updates its own slice of the one central copy (and of the one optimizer
//! state); under Mirrored each replica updates its whole copy with its own
//! copy of the state. Optimizer state follows the placement of its variables:
//! it lives in the space of the Compute it was made for (a GPU replica's
//! moments stay on its GPU), and updates run there (kernels/compute.hpp).
//! Every optimizer takes global_clipnorm in its options (clipping by the
//! global norm, applied by the executors).
//!   strata::nn::OptimizerState st = opt.make_state(n);
//!   opt.apply(w, g, st, /*offset=*/0, /*step=*/0);

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <strata/kernels/buffer.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/nn/optimizers/learning_rate.hpp>

namespace strata::nn {

//! Per-element state vectors ("slots", e.g. Adam's m and v) of one placement
//! copy, in the space of `compute`.
struct OptimizerState {
  kernels::Compute* compute = nullptr;
  std::vector<kernels::Buffer<float>> slots;
  //! A second scalar per iteration for a captured step, in the compute's
  //! memory (AdamW's decay; the step size is in the executor's table):
  //! written by Optimizer::prepare_steps, null until then.
  std::shared_ptr<kernels::RateTable> table;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual std::size_t slot_count() const noexcept = 0;
  //! The kind and hyper-parameters, for a run's fingerprint (workers of one
  //! run must agree on it): "SGD(learning_rate=0.01, momentum=0.9, nesterov=1)".
  //! A schedule shows its rate at step 0.
  [[nodiscard]] virtual std::string describe() const { return name(); }
  //! Zeroed state for `n` elements in `c`'s space.
  [[nodiscard]] OptimizerState make_state(std::size_t n, kernels::Compute& c = kernels::host_compute()) const {
    OptimizerState s{&c, {}, nullptr};
    for (std::size_t i = 0; i < slot_count(); ++i) {
      s.slots.emplace_back(c, Shape{n});
      c.fill(s.slots.back().data(), 0.f, n);
    }
    return s;
  }
  //! One update of w[i] (i = offset + local index into the state) from g, on
  //! the state's compute (w and g in its space); `step` counts updates
  //! before this one (0 for the first).
  void apply(std::span<float> w, std::span<const float> g, OptimizerState& s, std::size_t offset,
             std::int64_t step) const {
    update(s.compute ? *s.compute : kernels::host_compute(), w, g, s, offset, step);
  }
  //! The same update inside a capturable step (kernels/step_state.hpp):
  //! the step size read from `d`'s table at the iteration in the compute's
  //! memory (what step_rate gives), the update skipped when `d` is gated shut.
  void apply_at(std::span<float> w, std::span<const float> g, OptimizerState& s, std::size_t offset,
                const kernels::DeviceStep& d) const {
    update_at(s.compute ? *s.compute : kernels::host_compute(), w, g, s, offset, d);
  }
  //! Before captured steps of iterations `step` to `step + count - 1`
  //! (execution/captured_steps.hpp, each time it fills its rate table): what
  //! apply_at reads besides the step size, written to the state's memory.
  void prepare_steps(OptimizerState& s, std::int64_t step, std::size_t count) const {
    prepare_at(s.compute ? *s.compute : kernels::host_compute(), s, step, count);
  }
  //! Clipping by the global norm (Keras' global_clipnorm, PyTorch's
  //! clip_grad_norm_): 0 when off, else c > 0, and the executors scale each
  //! step's reduced gradient by min(1, c / ||g||) before the update, the
  //! norm taken over every parameter of the model (reduced across the
  //! replicas, shards, stages or workers that update parts of it:
  //! execution/sync_executor.hpp). apply() alone, which sees a slice, does not clip.
  [[nodiscard]] float global_clipnorm() const noexcept { return clipnorm_; }
  //! The scalar of step `step`'s update that varies by step (Adam: the
  //! rate with its bias correction folded in; SGD: the rate), as apply_at reads it.
  [[nodiscard]] virtual float step_rate(std::int64_t /*step*/) const {
    throw Error(name() + " cannot run in a captured step (ExecutorOptions::capture_steps)");
  }
  //! A copy for an executor (a replica's, an updater's); its learning rate
  //! shares this one's run-time override (nn/optimizers/learning_rate.hpp).
  [[nodiscard]] virtual std::unique_ptr<Optimizer> clone() const = 0;
  //! The learning rate callbacks read and set at run time (ReduceLROnPlateau,
  //! LearningRateScheduler); nullptr for an optimizer without one to change.
  [[nodiscard]] virtual LearningRate* learning_rate() noexcept { return nullptr; }

 protected:
  virtual void update(kernels::Compute& c, std::span<float> w, std::span<const float> g, OptimizerState& s,
                      std::size_t offset, std::int64_t step) const = 0;
  virtual void update_at(kernels::Compute& /*c*/, std::span<float> /*w*/, std::span<const float> /*g*/,
                         OptimizerState& /*s*/, std::size_t /*offset*/, const kernels::DeviceStep& /*d*/) const {
    throw Error(name() + " cannot run in a captured step (ExecutorOptions::capture_steps)");
  }
  virtual void prepare_at(kernels::Compute& /*c*/, OptimizerState& /*s*/, std::int64_t /*step*/,
                          std::size_t /*count*/) const {}
  static float* slot(OptimizerState& s, std::size_t i, std::size_t offset) { return s.slots[i].data() + offset; }
  //! Sets global_clipnorm() (a derived constructor, from its options): 0 (off) or finite and > 0.
  void set_global_clipnorm(float c) {
    if (!(std::isfinite(c) && c >= 0.f))
      throw Error(name() + ": global_clipnorm must be finite and > 0 (or 0: no clipping), got " + std::to_string(c));
    clipnorm_ = c;
  }
  //! ", global_clipnorm=c" for describe() when clipping, else nothing (the fingerprints of runs without it stay).
  [[nodiscard]] std::string clip_field() const { return clipnorm_ > 0.f ? ", " + field("global_clipnorm", clipnorm_) : ""; }
  //! clone() of an optimizer `self` of type D whose rate is `rate`: the
  //! copy's rate shares this one's run-time override.
  template <class D>
  static std::unique_ptr<Optimizer> clone_of(const D& self, const LearningRate& rate) {
    auto c = std::make_unique<D>(self);
    c->learning_rate()->share_override_of(rate);  // a rate set at run time reaches every copy
    return c;
  }
  //! "learning_rate=..." for describe(): a constant's value ("learning_rate=0.001"); a schedule's
  //! parameters, or its rates at steps 0, 1, 10, ... 10^6 (its peak, not only its value at step 0).
  static std::string rate_field(const LearningRate& lr) {
    if (lr.is_constant()) return field("learning_rate", lr.scheduled(0));
    return "learning_rate=" + lr.describe();
  }
  //! "name=value" with the shortest form that reads back as the same float ("0.001", not "0.001000").
  static std::string field(const char* name, float v) {
    char buf[64];
    for (int digits = 6; digits <= 9; ++digits) {
      std::snprintf(buf, sizeof buf, "%s=%.*g", name, digits, static_cast<double>(v));
      if (std::strtof(std::strchr(buf, '=') + 1, nullptr) == v) break;
    }
    return buf;
  }

 private:
  float clipnorm_ = 0.f;
};

}  // namespace strata::nn
