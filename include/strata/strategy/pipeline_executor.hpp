#pragma once
//! The executor of Pipeline placement (model parallelism), written once for
//! stages on threads in one process and on the ranks of an MPI job: the
//! model's layers are split into S stages, each holding its layers' slice
//! of the variables, of the gradient and of the optimizer state. A batch is
//! cut into M micro-batches; stage s receives each one's input activations
//! from stage s - 1 and sends its output to s + 1 (send/recv, tag 0), and in
//! backward the gradients flow the other way (tag 1), in the order of the
//! schedule (pipeline_options.hpp, pipeline_stage.hpp). The micro-batches'
//! parameter gradients are summed in micro-batch order, then each stage
//! applies the update to its slice: one optimizer step per batch, the step
//! one replica takes on the whole batch (with M = 1, bitwise). The executor
//! knows no layers: only the ModelProgram's stage API (strategy/program.hpp).
//! With PipelineOptions::data_parallel = D, D copies of the pipeline run
//! side by side (lane d * S + s: copy d, stage s), each on its share of the
//! batch's rows, with its own activations and gradient; the copies of a
//! stage sum their gradients in copy order and apply the update once.
//! Clipping by the global norm (the optimizer's global_clipnorm): after the
//! copies' sum, copy 0 of each stage adds its squares, one all-reduce of a
//! double over every lane (Stages::sum_squares) gives each stage the whole
//! model's norm, and each scales its gradient before its update.
//!
//! What differs by transport is a Stages model (pipeline_stage.hpp says what it offers).
//!   strata::PipelineStrategy s{strata::cpu_replicas(2)};
//!   s.pipeline_options().micro_batches = 4;   // before making the model in s.scope(...)

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/partition.hpp>
#include <strata/kernels/host/maps.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/policy/placement.hpp>
#include <strata/strategy/clip_norm.hpp>
#include <strata/strategy/device_compute.hpp>
#include <strata/strategy/executor.hpp>
#include <strata/strategy/pipeline_options.hpp>
#include <strata/strategy/pipeline_profile.hpp>
#include <strata/strategy/pipeline_stage.hpp>
#include <strata/strategy/pipeline_threads.hpp>
#include <strata/strategy/state_slices.hpp>

namespace strata::detail {

template <class Transport>
class PipelineExecutor final : public Executor {
 public:
  PipelineExecutor(Transport t, ModelProgram& program, PipelineOptions opts, PipelineStats& stats)
      : tr_(std::move(t)), program_(program), opts_(std::move(opts)), stats_(stats) {}
  // The lanes' programs and updaters hold memory of the computes: they go first (members in reverse order).
  ~PipelineExecutor() override = default;

  [[nodiscard]] bool placed() const noexcept override { return placed_; }
  //! The whole model's variables (across ranks: the other stages' as of the
  //! last training pass's end); GPU stages' read back from their memory.
  [[nodiscard]] const Tensor<float>& value() const override {
    read_back();
    return value_;
  }
  void assign(const Tensor<float>& v) override {
    std::copy_n(v.data(), value_.size(), value_.data());
    stale_ = false;
    if (gpu_) upload_values(copies_.begin);
  }
  [[nodiscard]] bool is_chief() const noexcept override { return tr_.is_chief(); }
  [[nodiscard]] bool state_settled_between_steps() const noexcept override { return Transport::settled; }

  //! Collective across ranks: every rank starts from rank 0's `init`.
  void place(const Tensor<float>& init) override {
    placed_ = false;
    const std::size_t R = tr_.size(), D = opts_.data_parallel;
    const PipelineWords w = Transport::words;
    if (D == 0) throw Error("pipeline: data_parallel is 0; give 1 for one pipeline, D for D copies of it");
    if (R % D)
      throw Error(std::string(w.where) + ": " + std::to_string(R) + " " + w.unit + " do not make data_parallel = " +
                  std::to_string(D) + " copies of a pipeline: " + w.ask + " D x S " + w.unit +
                  " for D copies of S stages");
    Transport::check(opts_);
    const std::size_t S = R / D;
    counts_ = program_.layer_param_counts();
    widths_ = program_.layer_output_widths();
    cuts_ = program_.cuts();
    ranges_ = opts_.stages.empty() ? balance_stages(counts_, S, cuts_) : opts_.stages;
    check_stages(ranges_, program_.num_layers(), S, cuts_);
    if (opts_.micro_batches == 0) throw Error("pipeline: micro_batches is 0; a batch needs at least one micro-batch");
    if (opts_.balance == Balance::Measured && !opts_.stages.empty())
      throw Error("pipeline: stages given by hand and Balance::Measured; give one or the other");
    profiled_ = opts_.balance != Balance::Measured;
    value_ = init;
    stale_ = false;
    tr_.place(S, D, value_);
    copies_ = tr_.copies(), here_ = tr_.stages();
    remote_ = copies_.size() < D || here_.size() < S;
    gpu_ = tr_.device(copies_.begin, here_.begin).is_gpu();
    if (gpu_ && !profiled_)
      throw Error("pipeline: Balance::Measured times the layers on the host; stages on GPUs need the stages given "
                  "or balanced by parameters (Balance::Parameters)");
    updaters_.clear();
    lanes_.clear();
    computes_.clear();
    lanes_.resize(D);
    computes_.resize(D);
    for (std::size_t d = copies_.begin; d < copies_.end; ++d) {
      lanes_[d].resize(S);
      computes_[d].resize(S);
      for (std::size_t s = here_.begin; s < here_.end && gpu_; ++s)
        computes_[d][s] = make_compute(tr_.device(d, s), tr_.matmul());
    }
    layout();
    placed_ = true;
    reset_optimizer();
  }

  //! The optimizer's global_clipnorm (0: none).
  [[nodiscard]] float clipnorm() const {
    return updaters_.size() > here_.begin && updaters_[here_.begin] ? updaters_[here_.begin]->global_clipnorm() : 0.f;
  }

  void reset_optimizer() override {
    updaters_.clear();
    state_.clear();
    opt_slots_ = 0;
    if (!placed_ || !program_.compiled()) return;
    updaters_.resize(ranges_.size());
    for (std::size_t s = here_.begin; s < here_.end; ++s) {
      const std::size_t n = slices_[s].size();
      kernels::Compute* c = lanes_[copies_.begin][s].c;
      updaters_[s] = c ? program_.make_updater_on(*c, n) : program_.make_updater(n);
    }
    opt_slots_ = updaters_[here_.begin]->state().size();
    if (remote_)  // the other stages' slices, as of the last training pass's end
      for (std::size_t k = 0; k < opt_slots_; ++k) state_.emplace_back(Shape{value_.size()});
  }

  //! Every stage's slices joined (across ranks: the other stages' as of the last training pass's end).
  std::vector<Tensor<float>> optimizer_state() override {
    if (updaters_.empty()) return {};
    return join_state_slices(value_.size(), std::span<const Range>(slices_), [&](std::size_t s) {
      return updaters_[s] ? updaters_[s]->state() : state_slice(state_, slices_[s]);
    });
  }
  //! The whole state (as every rank loads a checkpoint); each stage here keeps its slice.
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (updaters_.empty()) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    if (remote_ && slots.size() != state_.size())
      throw ShapeError("set_optimizer_state: " + std::to_string(slots.size()) + " slots for an optimizer of " +
                       std::to_string(state_.size()));
    check_state_slots(slots, value_.size());
    for (std::size_t k = 0; k < state_.size(); ++k) std::copy_n(slots[k].data(), value_.size(), state_[k].data());
    for (std::size_t s = here_.begin; s < here_.end; ++s) updaters_[s]->set_state(state_slice(slots, slices_[s]));
  }

  PassTotals run_pass(Pass& pass) override {
    pass.runs_gradient_hook = true;  // on each lane's gradient, before the copies are summed
    PassTotals t = detail::run_batches(pass, program_.num_metrics(),
                                       [&](const Batch& b, std::size_t index, PassTotals& tt) { step(b, pass, tt, index); });
    if (pass.phase == Phase::Train) {
      for (std::size_t s = here_.begin; s < here_.end && !state_.empty(); ++s) {  // the stages here, for the others
        const auto mine = updaters_[s]->state();
        for (std::size_t k = 0; k < mine.size(); ++k)
          std::copy_n(mine[k].data(), mine[k].size(), state_[k].data() + slices_[s].begin);
      }
      read_back();  // GPU stages: the host copy current
      tr_.end_pass(value_, state_, slices_, stats_);
    }
    return t;
  }

 private:
  using clock = std::chrono::steady_clock;

  //! Makes the lanes here: for every copy here, the stages of ranges_ over
  //! their slice of the variables (a CPU stage: a view of value_; a GPU
  //! stage: a copy in its memory) and of a gradient of their own.
  void layout() {
    slices_ = stage_param_slices(ranges_, counts_, stats_);
    for (std::size_t d = copies_.begin; d < copies_.end; ++d)
      for (std::size_t s = here_.begin; s < here_.end; ++s) {
        StageLane& L = lanes_[d][s];
        const Range r = slices_[s];
        L.stage.reset();
        L.c = computes_[d][s].get();
        L.m = L.c ? static_cast<kernels::Memory*>(L.c) : &kernels::host_memory();
        const BoundThread bound(*L.m);
        if (L.c) L.value.resize(*L.m, Shape{r.size()});
        else L.value = kernels::Buffer<float>::borrow(*L.m, value_.data() + r.begin, Shape{r.size()});
        L.grad.resize(*L.m, Shape{r.size()});
        L.m->fill(L.grad.data(), 0.f, r.size());
        if (L.c) L.bad.resize(*L.m, Shape{1});
        L.stage = L.c ? program_.make_stage_on(*L.c, ranges_[s], L.values(), L.gradient())
                      : program_.make_stage(ranges_[s], L.values(), L.gradient());
      }
    if (gpu_) upload_values(copies_.begin);
  }
  //! GPU stages trained since value_ was read: it takes the stages' variables here (copy 0's).
  void read_back() const {
    if (!stale_) return;
    for (std::size_t s = here_.begin; s < here_.end; ++s) {
      const StageLane& L = lanes_[copies_.begin][s];
      const BoundThread bound(*L.m);
      if (L.value.size())
        L.m->download(value_.data() + slices_[s].begin, L.value.data(), L.value.size() * sizeof(float));
    }
    stale_ = false;
  }
  //! GPU stages: copies [from, end) here take their stages' variables from value_.
  void upload_values(std::size_t from) {
    for (std::size_t d = from; d < copies_.end; ++d)
      for (std::size_t s = here_.begin; s < here_.end; ++s) {
        StageLane& L = lanes_[d][s];
        const BoundThread bound(*L.m);
        if (L.value.size())
          L.m->upload(L.value.data(), value_.data() + slices_[s].begin, L.value.size() * sizeof(float));
      }
  }

  //! Balance::Measured (every stage here), on the first training batch:
  //! each layer's time on the first micro-batch, alone; then the split by
  //! those times (the optimizer state kept). Nothing trains.
  void profile(const Batch& b, std::size_t global, std::size_t m, std::int64_t it) {
    const std::size_t steps = std::max<std::size_t>(1, opts_.profile_steps);
    const std::vector<double> t = measure_layers(program_, value_.span(), counts_, b, shard_range(global, m, 0),
                                                 global, it, steps);
    const auto state = optimizer_state();
    ranges_ = balance_stages(measured_costs(t, steps, stats_.layer_seconds), ranges_.size(), cuts_);
    layout();
    reset_optimizer();
    if (!state.empty()) set_optimizer_state(state);
    profiled_ = true;
  }

  void step(const Batch& b, Pass& pass, PassTotals& t, std::size_t index) {
    const std::size_t global = b.x->shape()[0];
    if (global == 0) return;
    const bool train = pass.phase == Phase::Train;
    const std::size_t D = lanes_.size(), S = ranges_.size();
    if (train && !profiled_) profile(b, global, std::min(opts_.micro_batches, global), *pass.iteration);
    PipelineBatch pb = plan_batch(pass.phase, train && pass.finite, global, D, S, opts_.micro_batches,
                                  program_.num_metrics());
    // copy 0 has the most rows
    check_stage_budgets(opts_, ranges_, slices_, widths_, program_.input_width(), opt_slots_,
                        shard_range(pb.share[0].size(), pb.m[0], 0).size(), pb.m[0], train, stats_);
    for (std::size_t d = copies_.begin; d < copies_.end; ++d)
      for (std::size_t s = here_.begin; s < here_.end; ++s)
        lanes_[d][s].stage->set_slots(train ? in_flight(opts_.schedule, s, S, std::max<std::size_t>(1, pb.m[d])) : 1);
    if (pass.phase == Phase::Predict) pb.predictions = std::span<float>(b.predictions, global * widths_.back());
    tr_.prepare(pb);
    const std::int64_t it = *pass.iteration;
    bad_ = 0;
    try {
      tr_.run([&](auto& ctx, std::size_t d, std::size_t s) { lane(ctx, pb, b, d, s, it, pass); });
    } catch (...) {
      for (auto& copy : lanes_)  // a GPU may still run what a failed step queued
        for (StageLane& L : copy) settle(L);
      throw;
    }
    if (train && gpu_) {
      stale_ = true;
      if (bad_ == 0 && copies_.size() > 1) {  // the other copies here take copy 0's updated variables (host-staged)
        read_back();
        upload_values(copies_.begin + 1);
      }
    }
    if (pass.phase != Phase::Predict)
      for (const ReplicaResult& r : pb.results) t.add(r.loss, r.rows, r.metrics);  // copy, then micro-batch order
    t.samples += global;
    if (!train) return;
    ++stats_.steps;
    if (bad_ > 0) return pass.skip_step(index, it, bad_);
    pass.applied_step();
    ++*pass.iteration;
  }

  //! Stage s of copy d on its share of the batch (its neighbours: lanes
  //! d * S + s - 1 and d * S + s + 1), then its part of the update. The
  //! measurements are copy 0's.
  //! A custom loop's hook (Pass::gradient_hook) sees the lane's gradient
  //! (its stage's slice, its copy's rows; a GPU stage's staged on the host)
  //! before the copies are summed (on the host: copy 0 uploads the sum).
  template <class Ctx>
  void lane(Ctx& ctx, PipelineBatch& pb, const Batch& b, std::size_t d, std::size_t s, std::int64_t it,
            const Pass& pass) {
    const auto start = clock::now();
    StageLane& L = lanes_[d][s];
    const BoundThread bound(*L.m);  // this thread issues the lane's calls: its GPU current
    const std::size_t S = pb.stages, D = pb.copies();
    const bool train = pb.phase == Phase::Train;
    PipelineStats::Stage* stat = d == 0 ? &stats_.stages[s] : nullptr;
    const StageWork w{.s = s,
                      .S = S,
                      .me = static_cast<int>(d * S + s),
                      .schedule = opts_.schedule,
                      .phase = pb.phase,
                      .share = pb.share[d],
                      .m = pb.m[d],
                      .global = pb.global,
                      .it = it,
                      .results = pb.results.data() + pb.first[d],
                      .stat = stat,
                      .staged = gpu_ ? L.m : nullptr};
    double busy = run_stage_batch(ctx, *L.stage, b, w);
    const Range r = slices_[s];
    const std::span<float> g = L.gradient();
    // where the lane's final gradient is read: a CPU stage's in place; a GPU stage's on the host when staged
    const bool staged = train && gpu_ && (pass.gradient_hook || D > 1);
    if (staged) L.host = Tensor<float>{Shape{g.size()}};
    const std::span<float> hg = gpu_ ? L.host.span() : g;
    double count = 0;
    const auto timed = [&](auto&& fn) {
      const auto t0 = clock::now();
      fn();
      busy += std::chrono::duration<double>(clock::now() - t0).count();
    };
    if (train)
      timed([&] {
        if (pb.m[d] == 0) L.m->fill(g.data(), 0.f, g.size());  // an empty share: a zero gradient
        L.stage->finish_gradient(static_cast<int>(D));         // this copy's share of the L2 gradient
        if (staged && !g.empty()) L.m->download(hg.data(), g.data(), g.size_bytes());
        if (pass.gradient_hook) {
          ReplicaGradient rg{hg, r.begin, value_.size(), static_cast<int>(d * S + s), static_cast<int>(D * S),
                             pb.share[d].size(), pb.global, it};
          pass.gradient_hook(rg);
          if (gpu_ && D == 1 && !g.empty()) L.m->upload(g.data(), hg.data(), g.size_bytes());
        }
        if (pb.check)
          count = gpu_ && !staged ? count_nonfinite(L)
                                  : static_cast<double>(kernels::host::count_nonfinite(hg.data(), hg.size()));
      });
    const double bad = tr_.agree(ctx, pb, d, s, count);
    if (d == copies_.begin && s == here_.begin) bad_ = bad;
    const float clip = train && bad == 0 ? clipnorm() : 0.f;
    if (train && bad == 0 && d == copies_.begin)
      timed([&] {
        if (D > 1) {  // on the host (a GPU stage's staged there)
          for (std::size_t c = d + 1; c < copies_.end; ++c) {  // in copy order: the same sum on every run
            const float* o = gpu_ ? lanes_[c][s].host.data() : lanes_[c][s].grad.data();
            for (std::size_t i = 0; i < hg.size(); ++i) hg[i] += o[i];
          }
          tr_.sum_copies(s, hg);  // the copies elsewhere
          if (gpu_ && !g.empty()) L.m->upload(g.data(), hg.data(), g.size_bytes());
        }
        if (r.size() && clip == 0.f) updaters_[s]->apply(L.values(), g, 0, it);
      });
    if (clip > 0.f)  // clipping by the global norm: over every stage's layers (L.bad: the scratch of a GPU stage)
      timed([&] {
        const double sq = tr_.sum_squares(ctx, d == 0 ? square_sum_in(L.c, g, L.bad) : 0.0);  // copy 0 counts
        if (d != copies_.begin) return;
        clip_in(L.c, g, sq, clip, L.bad);
        if (r.size()) updaters_[s]->apply(L.values(), g, 0, it);
      });
    if (stat) {
      stat->busy_s += busy;
      stat->wall_s += std::chrono::duration<double>(clock::now() - start).count();
    }
  }

  Transport tr_;
  ModelProgram& program_;
  PipelineOptions opts_;
  PipelineStats& stats_;
  bool placed_ = false;
  Range copies_, here_;  // the copies and stages whose lanes run here
  bool remote_ = false;  // some lanes run elsewhere (other ranks)
  std::vector<std::size_t> counts_, widths_;
  std::vector<char> cuts_;  // per layer: whether a stage may start there (program_.cuts())
  std::vector<Range> ranges_, slices_;  // per stage: its layers, its parameters
  mutable Tensor<float> value_;  // GPU stages: read back when stale_
  mutable bool stale_ = false;    // GPU stages trained since value_ was read back
  bool gpu_ = false;              // the stages here run on GPUs
  std::vector<std::vector<std::unique_ptr<kernels::Compute>>> computes_;  // [copy][stage]: GPU stages' (outlive lanes_)
  std::vector<std::vector<StageLane>> lanes_;                             // [copy][stage], the lanes here
  std::vector<std::unique_ptr<Updater>> updaters_;                        // per stage here
  std::vector<Tensor<float>> state_;  // remote_: every stage's optimizer slots (the others' as of a pass end)
  std::size_t opt_slots_ = 0;
  bool profiled_ = true;  // Balance::Measured: whether the layers were timed and split by it
  double bad_ = 0;        // this step's non-finite gradient values (written by the first lane here)
};

template <>
struct ExecutorFor<Pipeline> {
  template <class S>
  static std::unique_ptr<Executor> make(S& s, ModelProgram& program) {
    return std::make_unique<PipelineExecutor<ThreadStages<S>>>(ThreadStages<S>{s}, program, s.pipeline_options(),
                                                               s.pipeline_stats());
  }
};

}  // namespace strata::detail
