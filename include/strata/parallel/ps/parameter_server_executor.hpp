#pragma once
//! The executor of ParameterServer placement: the variables live on the
//! servers (sharded, with the optimizer state), each batch of fit is one
//! step on one worker (pull the servers' value into the worker's copy,
//! forward, loss, backward, push the gradient), and the chief keeps a copy
//! of its own for evaluation and prediction, refreshed from the servers
//! after each training pass. Over MPI, the ranks other than the chief serve
//! it during fit and hold the trained value after. Clipping by the global
//! norm clips each pushed gradient by its own norm on the worker (at
//! staleness 0, before the servers average the round).
//! Not deterministic unless staleness is 0.
//!   strata::ParameterServerStrategy s{{.workers = 4, .servers = 2}};
//!   auto model = s.scope([] { return strata::nn::Sequential{...}; });   // trains through this executor

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/kernels/host/optim.hpp>
#include <strata/policy/placement.hpp>
#include <strata/ps/cluster_spec.hpp>
#include <strata/ps/runtime.hpp>
#include <strata/execution/executor.hpp>
#include <strata/execution/variable.hpp>

namespace strata::detail {

class ParameterServerExecutor final : public Executor {
 public:
  ParameterServerExecutor(ParameterServerRuntime& rt, ModelProgram& program) : rt_(rt), program_(program) {}
  ParameterServerExecutor(const ParameterServerExecutor&) = delete;
  ParameterServerExecutor& operator=(const ParameterServerExecutor&) = delete;

  [[nodiscard]] bool placed() const noexcept override { return copies_.has_value(); }
  //! Steps run asynchronously on the workers: settled only when a pass ends.
  [[nodiscard]] bool state_settled_between_steps() const noexcept override { return false; }
  [[nodiscard]] bool is_chief() const noexcept override { return rt_.role() == ParameterServerRuntime::Role::Chief; }
  [[nodiscard]] const Tensor<float>& value() const override { return copies_->copy(0); }

  //! Copy 0 is the chief's (evaluate, predict, get_weights), copy 1 + w
  //! worker w's pull of the servers' value.
  void place(const Tensor<float>& init) override {
    const int copies = rt_.num_workers() + 1;
    copies_.emplace(init, copies);
    grads_.assign(static_cast<std::size_t>(copies), Tensor<float>{Shape{program_.num_params()}});
    reps_.clear();
    for (int r = 0; r < copies; ++r)
      reps_.push_back(program_.make_replica(copies_->copy(r).span(), grads_[static_cast<std::size_t>(r)].span()));
    reset_optimizer();
  }

  //! The servers get the variables (sharded) and a fresh optimizer, whose
  //! state they update only on their shards' elements; the ServerState
  //! reaches that state by slices (across processes the chief's updater
  //! holds the logical state between runs). Collective over MPI.
  void reset_optimizer() override {
    if (!copies_ || !program_.compiled()) return;
    updater_ = program_.make_updater(program_.num_params());
    // The servers hold the update beyond this model's life (a worker ending
    // an empty step after a failed run completes a round): once the model
    // is gone it applies nothing (a 1 ms --timeout crashed the examples
    // calling a destroyed optimizer there); while it applies, the optimizer
    // stays.
    rt_.create_variables(program_.variable_shapes(), value(),
                         [weak = std::weak_ptr<Updater>(updater_)](std::span<float> w, std::span<const float> g,
                                                                   std::size_t offset, std::uint64_t step) {
                           if (const std::shared_ptr<Updater> u = weak.lock())
                             u->apply(w, g, offset, static_cast<std::int64_t>(step));
                         });
    if (!rt_.state_on_chief()) return;
    rt_.set_server_state(ServerState{
        .slots = updater_->state().size(),
        .read = [u = updater_.get()](std::span<const Range> ranges, std::span<float> out) {
          std::vector<Tensor<float>> st = u->state();
          slices(st, ranges, out.size(), [&](std::span<float> slot, std::size_t at) {
            std::copy(slot.begin(), slot.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
          });
        },
        .write = [u = updater_.get()](std::span<const Range> ranges, std::span<const float> in) {
          std::vector<Tensor<float>> st = u->state();
          slices(st, ranges, in.size(), [&](std::span<float> slot, std::size_t at) {
            std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(at), slot.size(), slot.begin());
          });
          u->set_state(st);
        }});
  }

  //! The optimizer state: the servers' when they run in this process
  //! (threads); across processes the chief's copy, gathered from the server
  //! ranks when the last training pass ended. Only the chief saves it.
  std::vector<Tensor<float>> optimizer_state() override {
    check_state_here("save");
    if (!rt_.servers_in_process() && !is_chief())
      throw Error("ParameterServerStrategy across processes: only the chief saves the optimizer state (this rank is a " +
                  std::string(rt_.role() == ParameterServerRuntime::Role::Server ? "server" : "worker") +
                  "); call save_checkpoint on the chief");
    return updater_ ? updater_->state() : std::vector<Tensor<float>>{};
  }
  std::vector<std::uint64_t> update_counters() const override { return rt_.shard_versions(); }
  //! The servers' versions: the checkpoint's when it has one per shard, else
  //! the model's step for every shard (a checkpoint of another placement).
  //! Across processes the chief's copy is set (the servers get it when the
  //! next training pass starts); on the other ranks nothing is.
  void set_update_counters(std::span<const std::uint64_t> c, std::int64_t step) override {
    check_state_here("restore");
    if (!restores_here()) return;
    std::vector<std::uint64_t> v = rt_.shard_versions();
    if (c.size() == v.size()) v.assign(c.begin(), c.end());
    else std::fill(v.begin(), v.end(), static_cast<std::uint64_t>(step));
    rt_.set_shard_versions(v);
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    check_state_here("restore");
    if (!updater_) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    if (restores_here()) updater_->set_state(slots);
  }

  void assign(const Tensor<float>& v) override {
    rt_.assign(v.span());
    copies_->assign(v);
  }

  //! A custom loop cannot take this executor's steps one at a time
  //! (Pass::custom_step): a step is one worker's batch, several in flight,
  //! and at staleness 0 a round of `workers` batches is one update, so a
  //! pass of one batch would be a round of its own, which fit never applies.
  PassTotals run_pass(Pass& pass) override {
    if (pass.custom_step && pass.phase == Phase::Train)
      throw Error("ParameterServerStrategy trains asynchronously: each batch is one worker's step, pushed while "
                  "others are in flight, and at staleness 0 the workers' batches of a round make one update, so a "
                  "custom loop cannot take its steps one at a time (nor see a replica's gradient before a "
                  "reduction: there is none); train with fit under it");
    return pass.phase == Phase::Train ? train(pass) : on_chief(pass);
  }

  //! Across processes, every rank (chief, servers, workers) first agrees on
  //! the run's fingerprint (layout, optimizer, seed, the first batch's size, the batches per epoch):
  //! a rank started differently stops the run everywhere with a RunMismatch.
  //! `pass` is fit's own pass for this: its first batch is not trained on.
  bool begin_fit(Pass& pass) override {
    std::optional<Batch> first = pass.next();  // builds the model from the data...
    if (!first && !placed()) pass.empty();     // ...or from its Input
    if (auto* agreeing = dynamic_cast<RunAgreement*>(&rt_)) {
      auto fields = program_.describe_for_fingerprint();
      fields.emplace_back("global batch", first && first->x ? std::to_string(first->x->shape()[0]) : "none");
      fields.emplace_back("batches per epoch", pass.batches ? std::to_string(*pass.batches) : "unknown");
      agreeing->agree_on_run(fields);
    }
    if (is_chief()) return true;
    rt_.set_step([this](int w, const StepInput& in) { return worker_step(w, in); });
    Tensor<float> trained{Shape{program_.num_params()}};
    rt_.serve(trained.span());
    copies_->assign(trained);
    return false;
  }
  //! The servers and workers of other processes return from fit with the chief's value.
  void end_fit() override {
    if (placed()) rt_.end_training(value().span());
  }

  void check_state_here(const char* what) const {
    if (!rt_.servers_in_process() && !rt_.state_on_chief())
      throw Error(std::string("ParameterServerStrategy across processes: cannot ") + what +
                  " the optimizer state, which lives on the server ranks; checkpoints of this strategy need its "
                  "servers in one process (threads), or save_weights for the weights alone");
  }

 private:
  //! Whether a restored state belongs in this process: the servers' own, or
  //! the chief's copy (across processes the others' is the chief's to send).
  [[nodiscard]] bool restores_here() const noexcept { return rt_.servers_in_process() || is_chief(); }
  //! Calls fn(slice, at) for each of `ranges` in each slot of `st`, `at`
  //! the slice's place in the ranges laid end to end, slot after slot
  //! (`total` elements in all, else a ShapeError before any is touched).
  template <class F>
  static void slices(std::vector<Tensor<float>>& st, std::span<const Range> ranges, std::size_t total, F&& fn) {
    std::size_t n = 0;
    for (const Range& r : ranges) n += r.size();
    if (n * st.size() != total)
      throw ShapeError("ParameterServerStrategy: " + std::to_string(total) + " elements of optimizer state for " +
                       std::to_string(st.size()) + " slots of " + std::to_string(n) + " elements");
    std::size_t at = 0;
    for (Tensor<float>& slot : st)
      for (const Range& r : ranges) {
        if (r.end > slot.size())
          throw ShapeError("ParameterServerStrategy: an optimizer slot of " + std::to_string(slot.size()) +
                           " elements has no elements " + std::to_string(r.begin) + ".." + std::to_string(r.end));
        fn(slot.span().subspan(r.begin, r.size()), at);
        at += r.size();
      }
  }

  //! A training step on worker `w`. Dropout is keyed by the step's number,
  //! not the worker, so a rescheduled step draws the same masks.
  StepOutput worker_step(int w, const StepInput& in) {
    const auto r = static_cast<std::size_t>(w) + 1;
    rt_.pull(w, copies_->copy(static_cast<int>(r)).span());
    const std::size_t rows = in.x.shape()[0];
    ReplicaResult res;
    reps_[r]->step(Batch{&in.x, &in.y, nullptr}, Range{0, rows},
                   StepInfo{Phase::Train, 0, 1, static_cast<std::uint64_t>(in.iteration),
                            rows ? 1.f / static_cast<float>(rows) : 0.f},
                   res);
    if (const float clip = updater_ ? updater_->global_clipnorm() : 0.f; clip > 0.f) {
      // clipping by the global norm: this worker's whole gradient, before it is cut into the servers' shards
      const std::span<float> g = grads_[r].span();
      kernels::host::scale(g.data(), g.size(), kernels::bodies::clip_factor(kernels::host::square_sum(g.data(), g.size()), clip));
    }
    rt_.push(w, grads_[r].span());
    return StepOutput{res.loss, std::move(res.metrics), res.rows};
  }

  //! One pass of fit on the chief: each batch a step scheduled on some
  //! worker, at most two per worker in flight; results taken in order (logs,
  //! progress and callbacks as in synchronous training). The chief's copy
  //! holds the servers' value after.
  //! A pass stopped early (a signal, a callback) stops scheduling; at
  //! staleness 0 it first completes the synchronous round under way: a round
  //! is the pass's next `workers` batches, and a partial one would be applied
  //! at join() as a round of its own (its own average, its own optimizer
  //! step), which the uninterrupted run never applies. So a stopped pass
  //! ends on a round boundary, as every position it saves must (a resumed
  //! run's rounds start where its pass starts).
  PassTotals train(Pass& pass) {
    PassTotals t = pass.first_totals(program_.num_metrics());
    rt_.set_step([this](int w, const StepInput& in) { return worker_step(w, in); });
    std::deque<RemoteValue<StepOutput>> inflight;
    const auto window = 2 * static_cast<std::size_t>(rt_.num_workers());
    std::size_t scheduled = 0, steps = 0;
    bool stop = false;
    // the hooks around each execution's steps (Pass::steps_per_execution), though steps are scheduled singly
    const std::size_t per = std::max<std::size_t>(pass.steps_per_execution, 1);
    const auto collect = [&](bool last) {
      const StepOutput out = inflight.front().get();
      inflight.pop_front();
      t.add(out.loss, out.rows, out.metrics);
      t.samples += out.rows;
      ++steps;
      if (steps % per == 0 || (last && inflight.empty())) stop = pass.end_step(steps - 1, t) || stop;
    };
    const bool rounds = rt_.staleness() == std::uint64_t{0};
    const auto round = static_cast<std::size_t>(rt_.num_workers());
    const auto more = [&] { return !stop || (rounds && scheduled % round != 0); };
    try {
      while (more() && (!pass.max_steps || scheduled < pass.max_steps)) {
        std::optional<Batch> b = pass.next();
        if (!b) break;
        if (scheduled % per == 0) pass.begin_step(scheduled);
        inflight.push_back(rt_.schedule(StepInput{*b->x, *b->y, (*pass.iteration)++}));
        ++scheduled;
        while (inflight.size() > window) collect(false);
      }
      while (!inflight.empty()) collect(true);
      rt_.join();
    } catch (...) {
      try {
        rt_.join();  // the steps still running use the model
      } catch (...) {
      }
      throw;
    }
    if (placed()) rt_.read(copies_->copy(0).span());
    return t;
  }

  //! Evaluation and prediction: the chief's copy, one replica on the caller's thread.
  PassTotals on_chief(Pass& pass) {
    return run_batches(pass, program_.num_metrics(), [&](const Batch& b, std::size_t, PassTotals& t) {
      const std::size_t rows = b.x->shape()[0];
      if (!rows) return;
      ReplicaResult res;
      reps_[0]->step(b, Range{0, rows},
                     StepInfo{pass.phase, 0, 1, static_cast<std::uint64_t>(*pass.iteration),
                              1.f / static_cast<float>(rows)},
                     res);
      if (pass.phase != Phase::Predict) t.add(res.loss, res.rows, res.metrics);
      t.samples += rows;
    });
  }

  ParameterServerRuntime& rt_;
  ModelProgram& program_;
  std::optional<MirroredVariable<float>> copies_;
  std::vector<Tensor<float>> grads_;
  std::vector<std::unique_ptr<ReplicaProgram>> reps_;
  std::shared_ptr<Updater> updater_;  // shared: the servers' update holds it weakly
};

//! ParameterServerStrategy's executor (chosen by parallel/dispatch.hpp).
template <class S>
std::unique_ptr<Executor> make_parameter_server_executor(S& s, ModelProgram& program) {
  return std::make_unique<ParameterServerExecutor>(s.runtime(), program);
}

}  // namespace strata::detail
