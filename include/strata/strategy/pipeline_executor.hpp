#pragma once
//! The executor of Pipeline placement (model parallelism in one process):
//! the model's layers are split into S stages, stage s on replica s (a
//! thread); each holds its layers' slice of the variables, of the gradient
//! and of the optimizer state. A batch is cut into M micro-batches; stage s
//! receives each one's input activations from stage s - 1 and sends its
//! output to s + 1 (communicator send/recv, tag 0), and in backward the
//! gradients flow the other way (tag 1), in the order of the schedule
//! (pipeline_options.hpp). The micro-batches' parameter gradients are summed
//! in micro-batch order, then each stage applies the update to its slice:
//! one optimizer step per batch, the step one replica takes on the whole
//! batch (with M = 1, bitwise). The executor knows no layers: only the
//! ModelProgram's stage API (strategy/program.hpp).
//! With PipelineOptions::data_parallel = D, D copies of the pipeline run
//! side by side on D x S replicas (replica d * S + s: copy d, stage s), each
//! on its share of the batch's rows, with their own activations and
//! gradient; one all-reduce per step (also the barrier after which every
//! copy's gradient is final) decides on the finiteness check, then copy 0 of
//! each stage sums the D gradients of its slice in copy order and applies
//! the update to the one copy of the variables that every copy reads.
//! A stage that throws releases the others from their recv (the thread
//! team's abort): the batch's run ends with ReplicaError naming that stage.
//!   strata::PipelineStrategy s{strata::cpu_replicas(2)};
//!   s.pipeline_options().micro_batches = 4;   // before making the model in s.scope(...)

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/host/maps.hpp>
#include <strata/policy/placement.hpp>
#include <strata/strategy/executor.hpp>
#include <strata/strategy/pipeline_options.hpp>
#include <strata/strategy/pipeline_stage.hpp>

namespace strata::detail {

template <class Strat>
class PipelineExecutor final : public Executor {
 public:
  PipelineExecutor(Strat& s, ModelProgram& program, PipelineOptions opts, PipelineStats& stats)
      : s_(s), program_(program), opts_(std::move(opts)), stats_(stats) {}

  [[nodiscard]] bool placed() const noexcept override { return !ranges_.empty(); }
  [[nodiscard]] const Tensor<float>& value() const override { return value_; }
  void assign(const Tensor<float>& v) override { std::copy_n(v.data(), value_.size(), value_.data()); }

  void place(const Tensor<float>& init) override {
    const auto R = static_cast<std::size_t>(s_.num_replicas_in_sync());
    const std::size_t D = opts_.data_parallel;
    if (D == 0) throw Error("pipeline: data_parallel is 0; give 1 for one pipeline, D for D copies of it");
    if (R % D)
      throw Error("pipeline: " + std::to_string(R) + " replicas do not make data_parallel = " + std::to_string(D) +
                  " copies of a pipeline: give D x S replicas for D copies of S stages");
    const std::size_t S = R / D;
    const std::size_t L = program_.num_layers();
    counts_ = program_.layer_param_counts();
    widths_ = program_.layer_output_widths();
    ranges_ = opts_.stages.empty() ? balance_stages(counts_, S) : opts_.stages;
    check_stages(ranges_, L, S);
    if (opts_.micro_batches == 0) throw Error("pipeline: micro_batches is 0; a batch needs at least one micro-batch");
    if (opts_.balance == Balance::Measured && !opts_.stages.empty())
      throw Error("pipeline: stages given by hand and Balance::Measured; give one or the other");
    profiled_ = opts_.balance != Balance::Measured;
    value_ = init;
    grads_.assign(D, Tensor<float>{Shape{init.size()}});
    layout();
    reset_optimizer();
  }

  void reset_optimizer() override {
    updaters_.clear();
    opt_slots_ = 0;
    if (ranges_.empty() || !program_.compiled()) return;
    for (const Range& r : slices_) updaters_.push_back(program_.make_updater(r.size()));
    opt_slots_ = updaters_.front()->state().size();
  }

  std::vector<Tensor<float>> optimizer_state() override {
    std::vector<Tensor<float>> out;
    for (std::size_t s = 0; s < updaters_.size(); ++s) {
      auto part = updaters_[s]->state();
      if (out.empty())
        for (std::size_t k = 0; k < part.size(); ++k) out.emplace_back(Shape{value_.size()});
      for (std::size_t k = 0; k < part.size(); ++k)
        std::copy_n(part[k].data(), part[k].size(), out[k].data() + slices_[s].begin);
    }
    return out;
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (updaters_.empty()) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    for (std::size_t s = 0; s < updaters_.size(); ++s) {
      std::vector<Tensor<float>> part;
      for (const auto& t : slots) {
        if (t.size() != value_.size())
          throw ShapeError("set_optimizer_state: a slot of " + std::to_string(t.size()) + " elements for " +
                           std::to_string(value_.size()) + " parameters");
        Tensor<float> p{Shape{slices_[s].size()}};
        std::copy_n(t.data() + slices_[s].begin, p.size(), p.data());
        part.push_back(std::move(p));
      }
      updaters_[s]->set_state(part);
    }
  }

  PassTotals run_pass(Pass& pass) override {
    return detail::run_batches(pass, program_.num_metrics(),
                               [&](const Batch& b, std::size_t index, PassTotals& t) { step(b, pass, t, index); });
  }

 private:
  //! Makes the stages of ranges_, for every copy, over value_ and its gradient.
  void layout() {
    stages_.clear();
    stages_.resize(grads_.size());
    slices_ = stage_param_slices(ranges_, counts_, stats_);
    for (std::size_t s = 0; s < ranges_.size(); ++s) {
      const Range r = slices_[s];
      for (std::size_t d = 0; d < grads_.size(); ++d)
        stages_[d].push_back(program_.make_stage(ranges_[s], value_.span().subspan(r.begin, r.size()),
                                                 grads_[d].span().subspan(r.begin, r.size())));
    }
  }

  //! Balance::Measured, on the first training batch: each layer's time on
  //! the first micro-batch, alone; then the split by those times (the
  //! optimizer state kept). Gradients go to scratch: nothing trains.
  void profile(const Batch& b, std::size_t global, std::size_t m, std::int64_t it) {
    using clock = std::chrono::steady_clock;
    const std::size_t L = counts_.size();
    Tensor<float> scratch{Shape{value_.size()}};
    std::vector<std::unique_ptr<StageProgram>> one;
    for (std::size_t l = 0, off = 0; l < L; off += counts_[l++]) {
      one.push_back(program_.make_stage(Range{l, l + 1}, value_.span().subspan(off, counts_[l]),
                                        scratch.span().subspan(off, counts_[l])));
      one.back()->set_slots(1);
    }
    const Range rows = shard_range(global, m, 0);
    const StageStep info{Phase::Train, 0, static_cast<std::uint64_t>(it), 1.f / static_cast<float>(global)};
    std::vector<double> t(L, 0.0);
    const auto timed = [&](std::size_t l, auto&& fn) {
      const auto t0 = clock::now();
      fn();
      t[l] += std::chrono::duration<double>(clock::now() - t0).count();
    };
    for (std::size_t p = 0; p < std::max<std::size_t>(1, opts_.profile_steps); ++p) {
      const float* in = b.x->data() + rows.begin * program_.input_width();
      for (std::size_t l = 0; l < L; ++l)
        timed(l, [&] { in = one[l]->forward(0, in, rows.size(), info).data(); });
      ReplicaResult r;
      timed(L - 1, [&] { one[L - 1]->loss(0, *b.y, rows, info, r); });
      const float* dout = nullptr;
      for (std::size_t l = L; l-- > 0 && one[l]->has_backward();)
        timed(l, [&] { dout = one[l]->backward(0, dout, true).data(); });
    }
    stats_.layer_seconds.clear();
    std::vector<std::size_t> cost(L);
    for (std::size_t l = 0; l < L; ++l) {
      stats_.layer_seconds.push_back(t[l] / static_cast<double>(std::max<std::size_t>(1, opts_.profile_steps)));
      cost[l] = static_cast<std::size_t>(t[l] * 1e9) + 1;  // nanoseconds; a layer is never free
    }
    const auto state = optimizer_state();
    ranges_ = balance_stages(cost, ranges_.size());
    layout();
    reset_optimizer();
    if (!state.empty()) set_optimizer_state(state);
    profiled_ = true;
  }

  void step(const Batch& b, Pass& pass, PassTotals& t, std::size_t index) {
    const std::size_t global = b.x->shape()[0];
    if (global == 0) return;
    const bool train = pass.phase == Phase::Train;
    const std::size_t D = grads_.size(), S = ranges_.size();
    if (train && !profiled_) profile(b, global, std::min(opts_.micro_batches, global), *pass.iteration);
    // copy d: its share of the rows, its micro-batches, where its results go
    std::vector<Range> share(D);
    std::vector<std::size_t> ms(D), first(D + 1, 0);
    for (std::size_t d = 0; d < D; ++d) {
      share[d] = shard_range(global, D, d);
      ms[d] = std::min(opts_.micro_batches, share[d].size());
      first[d + 1] = first[d] + ms[d];
    }
    // copy 0 has the most rows
    check_stage_budgets(opts_, ranges_, slices_, widths_, program_.input_width(), opt_slots_,
                        shard_range(share[0].size(), ms[0], 0).size(), ms[0], train, stats_);
    for (std::size_t d = 0; d < D; ++d)
      for (std::size_t s = 0; s < S; ++s)
        stages_[d][s]->set_slots(train ? in_flight(opts_.schedule, s, S, std::max<std::size_t>(1, ms[d])) : 1);
    results_.assign(first[D], ReplicaResult{});
    const std::int64_t it = *pass.iteration;
    check_ = train && pass.finite;
    bad_ = 0;
    s_.run([&](auto& ctx) {
      const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
      const std::size_t d = r / S;
      run_stage(ctx, d, r % S, b, pass.phase, share[d], ms[d], first[d], global, it);
    });
    if (pass.phase != Phase::Predict)
      for (const ReplicaResult& r : results_) t.add(r.loss, r.rows, r.metrics);  // copy, then micro-batch order
    t.samples += global;
    if (!train) return;
    ++stats_.steps;
    if (bad_ > 0) return pass.skip_step(index, it, bad_);
    pass.applied_step();
    ++*pass.iteration;
  }

  //! Stage s of copy d on its `share` of the batch's rows, in `m` micro-batches
  //! (their results at results_[first + i]); its neighbours are replicas
  //! d * S + s - 1 and d * S + s + 1. The measurements are copy 0's.
  template <class Ctx>
  void run_stage(Ctx& ctx, std::size_t d, std::size_t s, const Batch& b, Phase phase, Range share, std::size_t m,
                 std::size_t first, std::size_t global, std::int64_t it) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const std::size_t S = ranges_.size();
    PipelineStats::Stage* stat = d == 0 ? &stats_.stages[s] : nullptr;
    const StageWork w{.s = s,
                      .S = S,
                      .me = static_cast<int>(d * S + s),
                      .schedule = opts_.schedule,
                      .phase = phase,
                      .share = share,
                      .m = m,
                      .global = global,
                      .it = it,
                      .results = results_.data() + first,
                      .stat = stat};
    double busy = run_stage_batch(ctx, *stages_[d][s], b, w);
    if (phase == Phase::Train) {
      const auto t0 = clock::now();
      update(ctx, d, s, m, it);
      busy += std::chrono::duration<double>(clock::now() - t0).count();
    }
    if (stat) {
      stat->busy_s += busy;
      stat->wall_s += std::chrono::duration<double>(clock::now() - start).count();
    }
  }

  //! After copy d's backward of stage s (m micro-batches; none: its share of
  //! the batch was empty, its gradient is zero).
  template <class Ctx>
  void update(Ctx& ctx, std::size_t d, std::size_t s, std::size_t m, std::int64_t it) {
    const Range r = slices_[s];
    const std::size_t D = grads_.size();
    std::span<float> g = grads_[d].span().subspan(r.begin, r.size());
    if (m == 0) std::fill(g.begin(), g.end(), 0.f);
    stages_[d][s]->finish_gradient(static_cast<int>(D));  // this copy's share of the L2 gradient
    if (check_ || D > 1) {  // every replica or none: the same decision everywhere
      float bad[1] = {check_ ? static_cast<float>(kernels::host::count_nonfinite(g.data(), g.size())) : 0.f};
      ctx.all_reduce(std::span<float>(bad), Sum);  // with D > 1, also: every copy's gradient is final
      if (d == 0 && s == 0) bad_ = bad[0];
      if (bad[0] != 0.f) return;
    }
    if (d != 0) return;
    for (std::size_t c = 1; c < D; ++c) {  // in copy order: the same sum on every run
      const float* o = grads_[c].data() + r.begin;
      for (std::size_t i = 0; i < g.size(); ++i) g[i] += o[i];
    }
    if (r.size()) updaters_[s]->apply(value_.span().subspan(r.begin, r.size()), g, 0, it);
  }

  Strat& s_;
  ModelProgram& program_;
  PipelineOptions opts_;
  PipelineStats& stats_;
  std::vector<std::size_t> counts_, widths_;
  std::vector<Range> ranges_, slices_;  // per stage: its layers, its parameters
  Tensor<float> value_;
  std::vector<Tensor<float>> grads_;                              // per copy: the gradient of every stage
  std::vector<std::vector<std::unique_ptr<StageProgram>>> stages_;  // [copy][stage]
  std::vector<std::unique_ptr<Updater>> updaters_;
  std::size_t opt_slots_ = 0;
  bool profiled_ = true;  // Balance::Measured: whether the layers were timed and split by it
  std::vector<ReplicaResult> results_;  // per copy and micro-batch (the last stages')
  bool check_ = false;
  double bad_ = 0;
};

template <>
struct ExecutorFor<Pipeline> {
  template <class S>
  static std::unique_ptr<Executor> make(S& s, ModelProgram& program) {
    return std::make_unique<PipelineExecutor<S>>(s, program, s.pipeline_options(), s.pipeline_stats());
  }
};

}  // namespace strata::detail
