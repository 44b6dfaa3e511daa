#pragma once
//! Executor: how a strategy runs a model's training, evaluation and
//! prediction (see execution/program.hpp for the seam). The executors live
//! in parallel/ (one folder per way of splitting the work) and
//! parallel/dispatch.hpp picks one; a placement of one's own is given one
//! by specializing detail::ExecutorFor<Placement>, and a strategy whose
//! placement has none fails to compile with a sentence saying so.
//!   std::unique_ptr<strata::Executor> ex = strategy.any().make_executor(program);
//!   ex->place(init);  auto totals = ex->run_pass(pass);

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/core/error.hpp>

#include <strata/core/concepts.hpp>
#include <strata/policy/placement.hpp>
#include <strata/execution/executor_options.hpp>
#include <strata/execution/program.hpp>

namespace strata {

class Executor {
 public:
  virtual ~Executor() = default;
  //! Places the variables, starting from `init` (across workers: the
  //! chief's), with fresh optimizer state. Collective across workers.
  virtual void place(const Tensor<float>& init) = 0;
  //! Fresh optimizer state (a new compile), where the variables are placed;
  //! nothing before the model is compiled.
  virtual void reset_optimizer() = 0;
  [[nodiscard]] virtual bool placed() const noexcept = 0;
  //! The variables' logical value (one copy, flat).
  [[nodiscard]] virtual const Tensor<float>& value() const = 0;
  //! Sets every copy (and the servers') to `v`.
  virtual void assign(const Tensor<float>& v) = 0;
  //! The optimizer's state, logical: per slot one host tensor of all
  //! num_params elements, however it is placed (a sharded update's slices
  //! joined, one copy of the replicated ones). Empty before compile.
  [[nodiscard]] virtual std::vector<Tensor<float>> optimizer_state() {
    throw Error("this strategy's executor cannot read its optimizer state (checkpoints need it)");
  }
  //! Sets the optimizer state, slots as optimizer_state() returns them,
  //! wherever it is placed (every copy, every shard).
  virtual void set_optimizer_state(std::span<const Tensor<float>> /*slots*/) {
    throw Error("this strategy's executor cannot set its optimizer state (checkpoints need it)");
  }
  //! Counters the optimizer's updates depend on besides the model's step
  //! (a parameter server's per-shard versions: its Adam steps); empty for
  //! the synchronous executors, whose step is the model's.
  [[nodiscard]] virtual std::vector<std::uint64_t> update_counters() const { return {}; }
  //! Sets them from a checkpoint: `counters` as update_counters() gave
  //! them under the same placement, else derived from `step` (the model's).
  virtual void set_update_counters(std::span<const std::uint64_t> /*counters*/, std::int64_t /*step*/) {}
  //! Whether the variables and optimizer state are settled after each step
  //! of a training pass (a checkpoint there is consistent); false where
  //! steps are still in flight until the pass ends (a parameter server).
  [[nodiscard]] virtual bool state_settled_between_steps() const noexcept { return true; }
  //! How the replicas' gradients are summed and why, where that is decided
  //! when the variables are placed (GPU replicas: the device kernel, NCCL
  //! or host memory; across workers too); empty elsewhere.
  [[nodiscard]] virtual std::string collectives_choice() const { return {}; }
  //! Runs a pass; returns its sums (at its end, every worker's).
  virtual PassTotals run_pass(Pass& pass) = 0;
  //! Predictions of a whole dataset, `all` rows in dataset order: across
  //! workers, joins what each computed (collective); `per_worker`: each
  //! worker predicted only its own data.
  virtual void join_predictions(std::span<float> /*all*/, bool /*per_worker*/) {}
  //! Before fit's epochs: false when this process does not drive them but
  //! served the ones that do until they ended (parameter-server ranks
  //! other than the chief), holding the trained value after. `pass` gives
  //! the data to build the model from.
  virtual bool begin_fit(Pass& /*pass*/) { return true; }
  //! After fit's epochs (also when they failed).
  virtual void end_fit() {}
  //! The process that reports (prints) for all.
  [[nodiscard]] virtual bool is_chief() const noexcept { return true; }
  //! Whether reading the logical state (optimizer_state(), and value()
  //! where the values are sharded) is collective across workers: every
  //! worker holds only its shards (ZeRO 2 and 3 across workers), so every
  //! worker calls it and the chief alone writes (Model::save_checkpoint).
  [[nodiscard]] virtual bool state_reads_collective() const noexcept { return false; }
};

//! An executor that hands every call to `inner_`. Every virtual function
//! of Executor is forwarded: one Executor gains must be added here too (or
//! the wrapped executor's own would never run).
class ForwardingExecutor : public Executor {
 public:
  explicit ForwardingExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
  void place(const Tensor<float>& init) override { inner_->place(init); }
  void reset_optimizer() override { inner_->reset_optimizer(); }
  bool placed() const noexcept override { return inner_->placed(); }
  const Tensor<float>& value() const override { return inner_->value(); }
  void assign(const Tensor<float>& v) override { inner_->assign(v); }
  std::vector<Tensor<float>> optimizer_state() override { return inner_->optimizer_state(); }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override { inner_->set_optimizer_state(slots); }
  std::vector<std::uint64_t> update_counters() const override { return inner_->update_counters(); }
  void set_update_counters(std::span<const std::uint64_t> c, std::int64_t step) override {
    inner_->set_update_counters(c, step);
  }
  bool state_settled_between_steps() const noexcept override { return inner_->state_settled_between_steps(); }
  std::string collectives_choice() const override { return inner_->collectives_choice(); }
  PassTotals run_pass(Pass& pass) override { return inner_->run_pass(pass); }
  void join_predictions(std::span<float> all, bool per_worker) override { inner_->join_predictions(all, per_worker); }
  bool begin_fit(Pass& pass) override { return inner_->begin_fit(pass); }
  void end_fit() override { inner_->end_fit(); }
  bool is_chief() const noexcept override { return inner_->is_chief(); }
  bool state_reads_collective() const noexcept override { return inner_->state_reads_collective(); }

 protected:
  std::unique_ptr<Executor> inner_;
};

namespace detail {
//! The executor of a placement of one's own, `P`: a static
//! `make(strategy, program)` returning std::unique_ptr<Executor>. The
//! library's placements are chosen in parallel/dispatch.hpp.
template <class P>
struct ExecutorFor {
  static_assert(dependent_false<P>,
                "strata: this placement policy has no executor, so no model can train under it: specialize "
                "strata::detail::ExecutorFor<YourPlacement> with a static make(strategy, program) returning "
                "std::unique_ptr<strata::Executor> (see parallel/dispatch.hpp)");
};

//! The batches of a pass's next execution: up to its steps_per_execution
//! (and what max_steps leaves after `done` steps), fewer when the data ends.
inline std::vector<Batch> next_batches(Pass& pass, std::size_t done) {
  std::vector<Batch> out;
  const std::size_t per = std::max<std::size_t>(pass.steps_per_execution, 1);
  while (out.size() < per && (!pass.max_steps || done + out.size() < pass.max_steps)) {
    std::optional<Batch> b = pass.next();
    if (!b) break;
    out.push_back(*b);
  }
  return out;
}

//! The loop of an executor that takes a pass's batches one at a time on
//! the caller's thread: step(batch, index, totals) for each, the pass's
//! begin_step and end_step around each execution (steps_per_execution
//! steps); ends with the data, at max_steps, or when end_step says so.
template <class Step>
PassTotals run_batches(Pass& pass, std::size_t num_metrics, Step&& step) {
  PassTotals t = pass.first_totals(num_metrics);
  for (std::size_t steps = 0;;) {
    const std::vector<Batch> group = next_batches(pass, steps);
    if (group.empty()) break;
    pass.begin_step(steps);
    for (const Batch& b : group) step(b, steps++, t);
    if (pass.end_step(steps - 1, t)) break;
  }
  return t;
}

}  // namespace detail

}  // namespace strata
