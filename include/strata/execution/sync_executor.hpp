#pragma once
//! The synchronous loop shared by the executors of synchronous placements
//! (mirrored, central storage, across workers): every global batch is split
//! into contiguous, balanced row ranges, one per replica (of every worker);
//! each replica computes the gradient of (sum of its rows' losses) / (global
//! batch size); the placement's executor reduces and applies it (Derived::
//! apply). p replicas thus take the step one replica takes on the whole
//! batch. Deterministic: per-replica sums are added in replica order.
//! With the gradient finiteness policy (Pass::finite) Derived::apply asks
//! finite_gradient between the reduction and the update: a step whose
//! reduced gradient holds a NaN or an infinity is skipped on every replica;
//! with the optimizer's global_clipnorm, clip_gradient then scales the
//! reduced gradient by the norm over every replica's part of it.
//! A custom loop's hook (Pass::gradient_hook) sees each replica's gradient
//! between its backward and Derived::apply: the one step fit takes, with a
//! look in between.
//!   class MyExecutor : public strata::detail::SyncExecutor<S, MyExecutor> { ... apply(ctx, r, it) ... };

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/memory.hpp>
#include <strata/gradient/clip_norm.hpp>
#include <strata/execution/execution.hpp>
#include <strata/execution/executor.hpp>
#include <strata/execution/state_slices.hpp>
#include <strata/execution/variable.hpp>

namespace strata::detail {

//! The workers of a strategy in one process: just this one.
struct OneWorker {
  [[nodiscard]] int size() const noexcept { return 1; }
  [[nodiscard]] int index() const noexcept { return 0; }
  void sum(std::span<double>) {}
  void sum(std::span<float>) {}
  void broadcast(std::span<float>) {}
};

//! A strategy's workers: what its `workers()` returns (across processes), else OneWorker.
template <class S>
auto workers_of(S& s) {
  if constexpr (requires { s.workers(); }) return s.workers();
  else return OneWorker{};
}

template <class S, class Derived>
class SyncExecutor : public Executor {
 public:
  SyncExecutor(S& s, ModelProgram& program) : s_(s), program_(program), workers_(workers_of(s)) {}

  [[nodiscard]] bool placed() const noexcept override { return !reps_.empty(); }
  [[nodiscard]] bool is_chief() const noexcept override { return workers_.index() == 0; }

  //! Every worker starts from the chief's `init`; the placement keeps it
  //! (Derived::place_values) and each local replica is bound to its view.
  void place(const Tensor<float>& init) override {
    Tensor<float> start = init;
    workers_.broadcast(start.span());
    const auto local = static_cast<std::size_t>(s_.num_local_replicas());
    derived().place_values(start, local);
    reps_.clear();
    results_.clear();
    for (std::size_t r = 0; r < local; ++r) reps_.push_back(derived().make_replica(r));
    reset_optimizer();
  }

  //! Runs the pass an execution at a time (Pass::steps_per_execution
  //! global batches): one run of the replicas takes all of its steps, each
  //! going on to the next batch by itself (execution/execution.hpp); the
  //! caller wakes them once per execution and runs the pass's hooks between.
  PassTotals run_pass(Pass& pass) override {
    pass.runs_gradient_hook = true;  // between each replica's backward and Derived::apply
    PassTotals t = pass.first_totals(program_.num_metrics());
    // With each worker's own share (sharded by file) the workers agree on
    // every global batch; one out of data takes part with an empty share
    // until all are. Predicting, each worker predicts its own rows alone.
    const bool own = pass.per_worker;
    const bool agree = own && pass.phase != Phase::Predict;
    const std::size_t per = std::max<std::size_t>(pass.steps_per_execution, 1);
    const bool zero = pass.phase == Phase::Predict && !own && workers_.size() > 1;
    for (std::size_t steps = 0; !pass.max_steps || steps < pass.max_steps;) {
      const std::size_t limit = pass.max_steps ? std::min(per, pass.max_steps - steps) : per;
      exec_.start(
          pass, limit,
          [this, zero](const Batch& b, std::size_t rows) {  // (the model is built by now)
            if (zero) std::fill_n(b.predictions, rows * program_.output_width(), 0.f);  // other workers' rows: zero before the sum
          },
          deadline(), reps_.size() <= std::max(1u, std::thread::hardware_concurrency()));
      if (agree) {  // as many batches taken on every worker, then one sum of their rows
        std::vector<std::optional<Batch>> got;
        std::vector<double> rows;
        for (std::size_t k = 0; k < limit; ++k) {
          got.push_back(pass.next());
          rows.push_back(got.back() ? static_cast<double>(got.back()->x->shape()[0]) : 0.0);
        }
        workers_.sum(std::span<double>(rows));
        std::vector<Batch> batches;
        std::vector<std::size_t> global;
        for (std::size_t k = 0; k < limit && rows[k] > 0; ++k) {
          batches.push_back(got[k] ? *got[k] : pass.empty());
          global.push_back(static_cast<std::size_t>(rows[k]));
        }
        if (batches.empty()) break;
        exec_.set(std::move(batches), std::move(global));
      } else if (!exec_.take_first()) {
        break;
      }
      pass.begin_step(steps);
      const std::size_t ran = execute(pass, own, t, steps);
      steps += ran;
      if (pass.end_step(steps - 1, t) || exec_.data_ended()) break;
    }
    if (pass.phase != Phase::Predict) sum_totals(t);
    return t;
  }

  void join_predictions(std::span<float> all, bool per_worker) override {
    if (!per_worker) workers_.sum(all);
  }

 protected:
  Derived& derived() noexcept { return static_cast<Derived&>(*this); }

  //! Derived::make_replica(r): replica r's program, bound to its buffers;
  //! Derived::before_step(r) readies them on replica r's thread.
  void before_step(std::size_t /*r*/) {}
  //! Derived::ready_for(ctx, r, pass): whom replica r's backward tells the
  //! ranges of its gradient that are final (gradient buckets), or null.
  template <class Ctx>
  GradientReady* ready_for(Ctx& /*ctx*/, std::size_t /*r*/, const Pass& /*pass*/) {
    return nullptr;
  }
  //! Derived::windows_for(ctx, r, pass): where replica r's layers find
  //! their parameters in this step when they are sharded (ZeRO 2 and 3), or null.
  template <class Ctx>
  ParameterWindows* windows_for(Ctx& /*ctx*/, std::size_t /*r*/, const Pass& /*pass*/) {
    return nullptr;
  }
  //! Derived::rows_for(b, global, own, p, r, g): the rows local replica r
  //! (global id g) computes of a global batch of `global` rows (`own`:
  //! b holds this worker's share), over `p` replicas: by default its
  //! balanced part, in replica order.
  [[nodiscard]] Range rows_for(const Batch& b, std::size_t global, bool own, std::size_t p, std::size_t r,
                               int g) const {
    return own ? shard_range(b.x->shape()[0], p, r) : shard_range(global, p, static_cast<std::size_t>(g));
  }
  //! Derived::counts(r): whether local replica r's loss and metrics go into the totals (by default every one's).
  [[nodiscard]] bool counts(std::size_t /*r*/) const noexcept { return true; }
  //! Derived::batch_for(b, r, global): the batch local replica r's program gets (by default b itself).
  Batch batch_for(const Batch& b, std::size_t /*r*/, std::size_t /*global*/) { return b; }
  //! Derived::adjust_step(ctx, info, r): a last word on replica r's StepInfo, on its thread.
  template <class Ctx>
  void adjust_step(Ctx& /*ctx*/, StepInfo& /*info*/, std::size_t /*r*/) {}
  //! Replica r failed with `why` (in its step or its update), on its thread:
  //! a Derived with collectives of its own releases the other replicas there.
  void replica_failed(std::size_t /*r*/, const std::string& /*why*/) {}
  // (Derived::with_host_gradient(r, fn), which each derived executor has:
  // fn(replica r's gradient in host memory); what fn leaves there is the
  // gradient the step reduces.)

  //! Called when a step failed, once no replica runs.
  void after_failure() {}

  //! Derived::apply's gate between the reduction and the update: with the
  //! finiteness policy on, whether the step's reduced gradient is finite.
  //! Each local replica r counts the NaN and infinite values of its slice
  //! `part` (in memory `m`: the host's or its device's; the local replicas'
  //! slices cover the gradient once) there, into `count` (its scratch in
  //! `m`, which the Derived keeps with its buffers), and one all-reduce of a float
  //! gives every replica of every worker the same total: one decision per
  //! step. Policy off: true, no work.
  template <class Ctx>
  bool finite_gradient(Ctx& ctx, std::size_t r, kernels::Memory& m, kernels::Buffer<double>& count,
                       std::span<const float> part) {
    if (!check_) return true;
    double local = 0;
    count.resize(m, Shape{1});
    m.upload(count.data(), &local, sizeof local);
    m.count_nonfinite(part.data(), part.size(), count.data());
    m.download(&local, count.data(), sizeof local);
    float bad[1] = {static_cast<float>(local)};
    ctx.all_reduce(std::span<float>(bad), Sum);
    // every worker's local slices cover the (same) reduced gradient: the sum counts it once per worker
    // (once in all where the slices span the workers: ZeRO 2 and 3 across workers)
    seen_bad_[r] = static_cast<double>(bad[0]);
    if (r == 0) bad_ = static_cast<double>(bad[0]) / (slices_span_workers_ ? 1 : workers_.size());
    return bad[0] == 0.f;
  }

  //! Derived::apply's clipping by the global norm, after finite_gradient
  //! let the step through (every replica calls it: one collective):
  //! `clipnorm` the updater's (0: off, no work). Replica r adds the squares
  //! of `part`, its slice of the reduced gradient (finite_gradient's: the
  //! local replicas' slices cover it once; workers other than the first add
  //! 0, their slices covering the same sum, unless slices_span_workers_), in the memory of `c` (null:
  //! the host's); one all-reduce of a double gives every replica of every
  //! worker the squared norm, and replica r scales `mine` (what it updates
  //! with: its slice, or its whole copy) by clip_factor (gradient/clip_norm.hpp).
  template <class Ctx>
  void clip_gradient(Ctx& ctx, kernels::Compute* c, kernels::Buffer<double>& scratch, std::span<const float> part,
                     std::span<float> mine, float clipnorm) {
    if (!(clipnorm > 0.f)) return;
    double sq[1] = {workers_.index() == 0 || slices_span_workers_ ? square_sum_in(c, part, scratch) : 0.0};
    ctx.all_reduce(std::span<double>(sq), Sum);
    clip_in(c, mine, sq[0], clipnorm, scratch);
  }

  //! How long a replica waits for the next batch of an execution: the replicas' collective deadline.
  std::chrono::milliseconds deadline() {
    if constexpr (requires { s_.options().timeout; }) return s_.options().timeout;
    else return std::chrono::minutes(2);
  }

  //! The steps of the execution exec_ holds (`own`: its batches are this
  //! worker's shares), the first being step `first` of the pass: the
  //! replicas run them in one run; then, in step order, each one's sums go
  //! into `t` and a training step is applied or skipped (the finiteness
  //! policy), as if each had run alone. Returns the steps taken. A failure
  //! counts the steps replica 0 completed; a batch that could not be taken
  //! throws its error after the steps before it.
  std::size_t execute(Pass& pass, bool own, PassTotals& t, std::size_t first) {
    const std::size_t n = std::max<std::size_t>(pass.steps_per_execution, 1);  // the most it may take
    const int sync = s_.num_replicas_in_sync();
    const auto p = static_cast<std::size_t>(own ? s_.num_local_replicas() : sync);
    check_ = pass.phase == Phase::Train && pass.finite;
    if (results_.size() < n) results_.resize(n, std::vector<ReplicaResult>(reps_.size()));
    bads_.assign(n, 0.0);
    done_ = 0;
    try {
      run_replicas(pass, own, p, sync);
    } catch (...) {
      derived().after_failure();
      try {
        account(pass, t, first, done_);  // the steps replica 0 completed are applied
      } catch (...) {  // the failure being reported is the one that counts
      }
      throw;
    }
    account(pass, t, first, done_);
    if (auto e = exec_.error()) std::rethrow_exception(e);  // the next batch's, after the steps before it
    return done_;
  }

  //! The first `done` steps of the execution in step order: their sums
  //! into `t`, and each training step applied (the model's iteration
  //! advanced) or skipped.
  void account(Pass& pass, PassTotals& t, std::size_t first, std::size_t done) {
    for (std::size_t k = 0; k < done; ++k) {
      if (exec_.global(k) == 0) continue;
      if (pass.phase != Phase::Predict)
        for (std::size_t r = 0; r < reps_.size(); ++r)  // replica order: deterministic
          if (derived().counts(r)) t.add(results_[k][r].loss, results_[k][r].rows, results_[k][r].metrics);
      t.samples += exec_.global(k);
      if (pass.phase != Phase::Train) continue;
      // A skipped step's loss and metrics stay in the totals (a NaN loss shows in the logs, with the count).
      if (bads_[k] > 0) {
        pass.skip_step(first + k, *pass.iteration, bads_[k]);
        continue;
      }
      pass.applied_step();
      ++*pass.iteration;
    }
  }

  //! Every local replica's part of an execution's steps (within one
  //! Strategy::run): each replica goes from one step to the next by itself
  //! (replica 0 taking each next batch as the step before starts), the
  //! step's collectives keeping them in step. Each keeps the optimizer
  //! iteration and the run of skipped steps as the caller will (a skip is
  //! one decision on every replica), and stops where max_bad_steps ends the pass.
  void run_replicas(Pass& pass, bool own, std::size_t p, int sync) {
    const std::int64_t it0 = *pass.iteration;
    const std::size_t max_bad = pass.finite ? pass.finite->max_bad_steps : 0;
    const std::size_t bad_run = pass.finite ? pass.finite->in_a_row : 0;
    seen_bad_.assign(reps_.size(), 0.0);
    s_.run([&](auto& ctx) {
      const std::size_t r = local_index(ctx);
      const int g = ctx.replica_id_in_sync_group();
      struct Leave {  // replica 0 hands nothing over after it leaves, however it leaves
        ExecutionBatches* e;
        ~Leave() {
          if (e) e->close();
        }
      } leave{r == 0 ? &exec_ : nullptr};
      std::int64_t it = it0;
      std::size_t in_a_row = bad_run;
      for (std::size_t k = 0;; ++k) {
        if (r == 0) exec_.take_next(k);
        if (!exec_.wait_for(k, r)) break;
        const std::size_t global = exec_.global(k);
        if (global != 0) {
          seen_bad_[r] = 0;
          if (r == 0) bad_ = 0;
          step_on(ctx, r, g, exec_.batch(k), pass, global, own, p, sync, it, results_[k][r]);
          if (r == 0) bads_[k] = bad_;
        }
        if (r == 0) done_ = k + 1;
        if (global == 0 || pass.phase != Phase::Train) continue;
        if (!check_ || seen_bad_[r] == 0) {
          ++it;
          in_a_row = 0;
        } else if (++in_a_row >= max_bad && max_bad != 0) {
          break;  // the caller's skip_step stops the pass here
        }
      }
    });
  }

  //! Replica r's part (global id g) of one step on a global batch of
  //! `global` rows (`own`: b holds this worker's share), optimizer iteration `it`.
  template <class Ctx>
  void step_on(Ctx& ctx, std::size_t r, int g, const Batch& b, Pass& pass, std::size_t global, bool own,
               std::size_t p, int sync, std::int64_t it, ReplicaResult& result) {
    const Range rows = derived().rows_for(b, global, own, p, r, g);
    try {
      derived().before_step(r);
      StepInfo info{pass.phase, g, sync, static_cast<std::uint64_t>(it), 1.f / static_cast<float>(global)};
      if (pass.phase == Phase::Train) info.ready = derived().ready_for(ctx, r, pass);
      info.windows = derived().windows_for(ctx, r, pass);
      derived().adjust_step(ctx, info, r);
      reps_[r]->step(derived().batch_for(b, r, global), rows, info, result);
      if (pass.phase != Phase::Train) return;
      if (pass.gradient_hook)  // a custom loop's look at this replica's gradient, before the reduction
        derived().with_host_gradient(r, [&](std::span<float> v) {
          ReplicaGradient rg{v, 0, v.size(), g, sync, rows.size(), global, it};
          pass.gradient_hook(rg);
        });
      derived().apply(ctx, r, it);
    } catch (const std::exception& ex) {
      derived().replica_failed(r, ex.what());
      throw;
    }
  }

  //! Collective across workers: the totals of every worker's rows (running
  //! sums within a pass cover this worker's rows only).
  void sum_totals(PassTotals& t) {
    if (workers_.size() == 1) return;
    std::vector<double> v{t.loss, static_cast<double>(t.local)};
    v.insert(v.end(), t.metrics.begin(), t.metrics.end());
    workers_.sum(v);
    t.loss = v[0];
    t.local = static_cast<std::size_t>(v[1]);
    std::copy(v.begin() + 2, v.end(), t.metrics.begin());
  }

  S& s_;
  ModelProgram& program_;
  decltype(workers_of(std::declval<S&>())) workers_;
  std::vector<std::unique_ptr<ReplicaProgram>> reps_;
  std::vector<std::vector<ReplicaResult>> results_;  // [step of the execution][local replica]
  bool check_ = false;  // this execution's training steps check their reduced gradient (set before the run)
  //! Whether the local replicas' slices of the reduced gradient are this
  //! worker's part of it only (ZeRO 2 and 3 across workers), not the whole.
  bool slices_span_workers_ = false;
  ExecutionBatches exec_;           // the batches of the execution under way
  double bad_ = 0;      // the current step's NaN and infinite values (written by local replica 0)
  std::vector<double> bads_;       // each step's of the execution (replica 0 copies bad_ there)
  std::vector<double> seen_bad_;   // per local replica: the total its current step's check saw
  std::size_t done_ = 0;           // the execution's steps replica 0 completed
};

}  // namespace strata::detail
