#pragma once
//! Captured training steps (ExecutorOptions::capture_steps): a one-device
//! executor's step captured once per batch size and replayed, as a CUDA
//! graph on a GPU (on the host, kernels::RecordingCompute with a graph's
//! rules). Nothing of a replayed step comes from the host: the rows go into
//! fixed input buffers first (ReplicaProgram::load); the iteration, the step
//! sizes (kernels::StepCounters, RateTable), the finiteness gate and the
//! clipping live on the device; loss and metric sums, bad labels and
//! skipped steps are read every `read_every` steps and at the pass's end.
//! The first step at a size runs eagerly (it sizes the buffers), the second
//! is captured. Eager and replayed steps give the same bits (captured_steps_test).
//!   s.executor_options().capture_steps = true;   // OneDeviceStrategy{gpu(0)}: each step one graph launch

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <strata/core/error.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/kernels/step_state.hpp>
#include <strata/execution/executor.hpp>
#include <strata/execution/program.hpp>

namespace strata::detail {

class CapturedSteps {
 public:
  //! Steps on `c` (whose captures_steps() is true), sums read every `read_every` steps.
  CapturedSteps(kernels::Compute& c, std::size_t read_every) : c_(c), every_(read_every) {
    if (every_ == 0 || every_ >= kernels::RateTable::capacity)
      throw Error("ExecutorOptions::read_every = " + std::to_string(read_every) + ": captured steps read back every 1 to " +
                  std::to_string(kernels::RateTable::capacity - 1) + " steps");
    counters_ = static_cast<kernels::StepCounters*>(c_.allocate(sizeof(kernels::StepCounters)));
    rates_ = static_cast<kernels::RateTable*>(c_.allocate(sizeof(kernels::RateTable)));
    norm_ = static_cast<double*>(c_.allocate(sizeof(double)));
  }
  CapturedSteps(const CapturedSteps&) = delete;
  CapturedSteps& operator=(const CapturedSteps&) = delete;
  ~CapturedSteps() {
    graph_.reset();
    c_.deallocate(norm_, sizeof(double));
    c_.deallocate(rates_, sizeof(kernels::RateTable));
    c_.deallocate(counters_, sizeof(kernels::StepCounters));
  }

  //! Forgets the captured step (the replica, its buffers or the optimizer changed).
  void forget() noexcept {
    graph_.reset();
    graph_rows_ = warm_rows_ = 0;
  }

  //! What a step runs: the replica, its updater, the `n` values and gradient it is bound to.
  struct Parts {
    ReplicaProgram& rep;
    Updater& up;
    float* value;
    float* grad;
    std::size_t n;
  };

  //! A training pass; `parts()` gives what a step runs once the pass's
  //! first batch has built and placed the model.
  template <class GetParts>
  PassTotals train(Pass& pass, std::size_t metrics, GetParts&& parts) {
    if (pass.gradient_hook)
      throw Error("a captured step (ExecutorOptions::capture_steps) cannot call a gradient hook: the gradient "
                  "never leaves the device; train this step without capture_steps");
    if (gated_ != (pass.finite != nullptr)) forget();  // the gate is part of the capture
    gated_ = pass.finite != nullptr;
    since_ = rows_since_ = 0;
    bool started = false;
    ReplicaProgram* last = nullptr;
    std::size_t last_index = 0;
    PassTotals t = run_batches(pass, metrics, [&](const Batch& b, std::size_t index, PassTotals& totals) {
      const std::size_t rows = b.x->shape()[0];
      if (rows == 0) return;
      Parts p = parts();
      if (!started) {
        kernels::StepCounters start{static_cast<std::uint64_t>(*pass.iteration), 0,
                                    pass.finite ? pass.finite->in_a_row : 0, 0.0};
        c_.upload(counters_, &start, sizeof start);
        fill_rates(p.up, *pass.iteration);
        p.rep.reset_sums();
        started = true;
      }
      ReplicaProgram& rep = p.rep;
      Updater& up = p.up;
      last = &rep;
      last_index = index;
      const auto value = p.value, grad = p.grad;
      const std::size_t n = p.n;
      rep.load(b, Range{0, rows});
      step(rep, up, value, grad, n, rows);
      ++*pass.iteration;  // as the device's unless the step is skipped: the read corrects it
      totals.samples += rows;
      rows_since_ += rows;
      if (++since_ == every_) read(pass, rep, up, totals, index);
    });
    if (since_ && last) read(pass, *last, parts().up, t, last_index);
    return t;
  }

 private:
  void step(ReplicaProgram& rep, Updater& up, float* value, float* grad, std::size_t n, std::size_t rows) {
    StepInfo info{Phase::Train, 0, 1, 0, 1.f / static_cast<float>(rows), counters_};
    const kernels::DeviceStep d{counters_, rates_, gated_};
    auto body = [&] {
      rep.run_loaded(info);
      if (const float clip = up.global_clipnorm(); clip > 0.f) {  // the norm read where the replay finds it
        c_.square_sum(grad, n, norm_);
        c_.clip_by_norm(grad, n, clip, norm_);
      }
      up.apply_at({value, n}, {grad, n}, 0, d);
      c_.end_step(counters_, gated_);
    };
    if (graph_ && rows == graph_rows_) return graph_->launch();
    if (rows != warm_rows_) {  // first at this size: eagerly, which sizes every buffer
      if (graph_ && rows > graph_rows_) forget();  // buffers may grow: the graph's pointers would dangle
      body();
      warm_rows_ = rows;
      return;
    }
    c_.begin_step_capture();
    try {
      body();
    } catch (...) {
      try {
        (void)c_.end_step_capture();
      } catch (...) {
      }
      throw;
    }
    graph_ = c_.end_step_capture();
    graph_rows_ = rows;
    graph_->launch();
  }

  //! The step sizes of iterations from `it` on, for every step until the next read.
  void fill_rates(Updater& up, std::int64_t it) {
    table_.base = static_cast<std::uint64_t>(it);
    table_.count = every_ + 1;
    for (std::size_t k = 0; k < table_.count; ++k) table_.rate[k] = up.step_rate(it + static_cast<std::int64_t>(k));
    c_.upload(rates_, &table_, sizeof table_);
    up.prepare_at(it, table_.count);  // what else its update reads by iteration (AdamW's decay)
  }

  void read(Pass& pass, ReplicaProgram& rep, Updater& up, PassTotals& t, std::size_t step) {
    kernels::StepCounters got;
    c_.download(&got, counters_, sizeof got);
    *pass.iteration = static_cast<std::int64_t>(got.iteration);  // the updates the device applied
    ReplicaResult r;
    const std::size_t rows = rows_since_;
    since_ = rows_since_ = 0;
    rep.take_sums(rows, r);  // throws for labels that are not class indices
    t.add(r.loss, r.rows, r.metrics);
    if (pass.finite) {
      pass.finite->skipped += got.skipped;
      pass.finite->in_a_row = got.in_a_row;
      if (got.skipped) {  // counted from 0 again
        kernels::StepCounters again = got;
        again.skipped = 0;
        c_.upload(counters_, &again, sizeof again);
      }
      const std::size_t max = pass.finite->max_bad_steps;
      if (max && got.in_a_row >= max)
        throw NonFiniteError("the gradient of " + std::to_string(got.in_a_row) +
                                 " captured steps in a row (up to step " + std::to_string(step) +
                                 ", optimizer iteration " + std::to_string(got.iteration) +
                                 ") held NaN or infinite values; their updates were skipped on the device "
                                 "(max_bad_steps = " + std::to_string(max) +
                                 "): stopping. Look for NaN or infinite inputs or labels, or lower the learning rate",
                             step);
    }
    fill_rates(up, *pass.iteration);
  }

  kernels::Compute& c_;
  std::size_t every_;
  kernels::StepCounters* counters_ = nullptr;  // in c_'s memory
  kernels::RateTable* rates_ = nullptr;        // in c_'s memory
  double* norm_ = nullptr;                     // in c_'s memory: the gradient's squared norm (clipping)
  kernels::RateTable table_;                   // the host's copy being filled
  std::unique_ptr<kernels::StepGraph> graph_;
  std::size_t graph_rows_ = 0, warm_rows_ = 0;
  bool gated_ = true;
  std::size_t since_ = 0, rows_since_ = 0;
};

}  // namespace strata::detail
