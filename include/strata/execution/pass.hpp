#pragma once
//! One pass over the data as a model drives it (Pass: the batches and the
//! hooks between steps), its running sums (PassTotals), a custom loop's look
//! at each replica's gradient (ReplicaGradient), and a run's fingerprint:
//! the rest of the seam of execution/program.hpp, which includes this.
//!   struct MyPass : strata::Pass { std::optional<strata::Batch> next() override; strata::Batch empty() override; };

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/execution/program.hpp>

namespace strata {

//! One replica's gradient in a training step, as a custom loop's hook sees
//! it (Pass::gradient_hook): after its backward, before the strategy
//! reduces it and applies the update. `values` is in host memory and may be
//! changed (clipped, scaled): what the hook leaves there is what is reduced.
//! Data-parallel replicas (mirrored, central storage, multi-worker) hold
//! the whole gradient (offset 0) of their rows: the gradient of (their
//! rows' loss sum) / (global batch) plus their share of the L2 term, so the
//! replicas' gradients sum to the step's. A pipeline stage holds its slice
//! of the parameters ([offset, offset + values.size()) of the flat layout)
//! for its copy's rows, summed over the micro-batches. Hooks run on the
//! replicas' threads, concurrently: a hook touches only its own gradient.
//!   pass.gradient_hook = [](strata::ReplicaGradient& g) { for (float& v : g.values) v = std::clamp(v, -1.f, 1.f); };
struct ReplicaGradient {
  std::span<float> values;  //!< the gradient (host memory)
  std::size_t offset = 0;   //!< where `values` starts in the flat parameter layout
  std::size_t params = 0;   //!< the model's parameter count (values.size() unless a slice)
  int replica = 0;          //!< global replica id (pipeline: the lane, copy x stages + stage)
  int replicas = 1;         //!< replicas (lanes) whose gradients make the step's update
  std::size_t rows = 0;     //!< rows of the global batch this gradient is of
  std::size_t global = 0;   //!< rows of the global batch
  std::int64_t iteration = 0;  //!< the optimizer step this gradient is for
};

//! Running sums of a pass. `loss`, `metrics` and `local` cover the rows
//! this process computed (at a pass's end: every worker's); `samples`
//! counts the global batches' rows.
struct PassTotals {
  double loss = 0;
  std::vector<double> metrics;
  std::size_t samples = 0;
  std::size_t local = 0;

  //! Adds what one replica (or one worker's step) computed on `rows` rows.
  void add(double row_loss, std::size_t rows, std::span<const double> row_metrics) {
    loss += row_loss;
    local += rows;
    for (std::size_t m = 0; m < metrics.size() && m < row_metrics.size(); ++m) metrics[m] += row_metrics[m];
  }
};

//! One pass over the data, as the model drives it: the batches (already
//! converted, the model built for them), and the hooks between steps.
class Pass {
 public:
  virtual ~Pass() = default;
  Phase phase = Phase::Train;
  std::size_t max_steps = 0;     //!< 0: until the data ends
  bool per_worker = false;       //!< the data is this worker's own share of each global batch
  std::optional<std::size_t> batches;  //!< batches in a pass of the data, where it knows (its cardinality)
  std::int64_t* iteration = nullptr;  //!< the model's optimizer step, advanced by training steps
  //! A resumed epoch's sums over the batches trained before its checkpoint
  //! (this worker's, as its running totals stood): the pass's sums go on
  //! from them, in the same order as a pass never stopped, so the epoch's
  //! logs are that pass's to the bit. Null: from zero.
  const PassTotals* carried = nullptr;
  //! The totals a pass's sums start from: `carried`, or zeros for `metrics` metrics.
  [[nodiscard]] PassTotals first_totals(std::size_t metrics) const {
    PassTotals t = carried ? *carried : PassTotals{};
    t.metrics.resize(metrics, 0.0);
    return t;
  }
  //! Steps run as one execution (nn::CompileOptions::steps_per_execution,
  //! Keras' name): the executor takes up to this many batches, runs their
  //! steps one after the other (the synchronous executors: in one run of
  //! the replicas, which take each next step themselves), and calls
  //! begin_step once before them (with the first step's index) and
  //! end_step once after them (with the last's). The pass keeps the last
  //! steps_per_execution batches next() returned valid. 1: the hooks
  //! around every step.
  std::size_t steps_per_execution = 1;

  //! The gradient finiteness policy of a training pass (nn::FitOptions::
  //! check_finite). A synchronous executor looks at each step's reduced
  //! gradient once (the same decision on every replica and worker); if it
  //! holds a NaN or an infinity, no replica applies the update (variables,
  //! optimizer state and `*iteration` stay as they were) and skip_step
  //! counts the step. The parameter-server executor (asynchronous) does not
  //! check. Null: no check, non-finite gradients reach the variables.
  struct FiniteCheck {
    std::size_t max_bad_steps = 10;  //!< consecutive skipped steps that stop training (0: never stop)
    std::size_t skipped = 0;         //!< steps skipped so far (the fit's count, across epochs)
    std::size_t in_a_row = 0;        //!< the current run of consecutive skipped steps
  };
  FiniteCheck* finite = nullptr;
  //! A training pass's hook on each replica's gradient between its backward
  //! and the reduction (a custom loop's: nn::Sequential::train_step), on the
  //! replica's thread. Empty: none (fit).
  std::function<void(ReplicaGradient&)> gradient_hook;
  //! Set by an executor that calls gradient_hook, before it asks for a batch
  //! (a custom loop refuses a hook the executor would not call).
  bool runs_gradient_hook = false;
  //! A custom loop's single step (nn::Sequential::train_step), not a pass of fit's.
  bool custom_step = false;
  //! Records that step `step` of this pass (optimizer iteration `it`) was
  //! skipped, its reduced gradient holding `bad` NaN or infinite values;
  //! throws NonFiniteError naming the step once max_bad_steps were in a row.
  void skip_step(std::size_t step, std::int64_t it, double bad) {
    ++finite->skipped;
    if (++finite->in_a_row < finite->max_bad_steps || finite->max_bad_steps == 0) return;
    throw NonFiniteError("the reduced gradient of step " + std::to_string(step) + " (optimizer iteration " +
                             std::to_string(it) + ") holds " + std::to_string(static_cast<long long>(bad)) +
                             " NaN or infinite values; " + std::to_string(finite->in_a_row) +
                             " steps in a row were skipped (max_bad_steps = " + std::to_string(finite->max_bad_steps) +
                             "): stopping. Look for NaN or infinite inputs or labels, or lower the learning rate; "
                             "FitOptions{.check_finite = false} lets such gradients through",
                         step);
  }
  //! A step whose update was applied: the run of skipped steps ends.
  void applied_step() noexcept {
    if (finite) finite->in_a_row = 0;
  }

  //! This process's next batch (nullopt: its data ended).
  virtual std::optional<Batch> next() = 0;
  //! A batch of no rows shaped like the data's (a worker out of data takes part with it).
  virtual Batch empty() = 0;
  //! Before each execution (steps_per_execution steps; 1: each step), with its first step's index.
  virtual void begin_step(std::size_t /*step*/) {}
  //! After each execution, with its last step's index and the totals after it; true stops the pass.
  virtual bool end_step(std::size_t /*step*/, const PassTotals&) { return false; }
};

//! The fields of a run's fingerprint, which the workers of one run and a
//! resumed run (nn::BackupAndRestore) must agree on: the program's (layout,
//! optimizer, seed) and, from fit's data, the global batch (`global_batch`:
//! its first batch's rows; nullopt: none) and the batches per epoch where
//! the dataset knows them; not when each worker reads its own share
//! (sharded by file), whose sizes may differ.
inline std::vector<std::pair<std::string, std::string>> run_fingerprint(const ModelProgram& program,
                                                                        std::optional<std::size_t> global_batch,
                                                                        const Pass& pass) {
  auto f = program.describe_for_fingerprint();
  if (pass.per_worker) return f;
  f.emplace_back("global batch", global_batch ? std::to_string(*global_batch) : "none");
  f.emplace_back("batches per epoch", pass.batches ? std::to_string(*pass.batches) : "unknown");
  return f;
}

}  // namespace strata
