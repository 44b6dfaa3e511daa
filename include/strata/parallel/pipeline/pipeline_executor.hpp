#pragma once
//! The executor of Pipeline placement (model parallelism), written once for
//! stages on threads in one process and on the ranks of an MPI job (what
//! differs is a Stages model: pipeline_threads.hpp, pipeline_ranks.hpp). S
//! stages each hold their layers' slice of the variables, gradient and
//! optimizer state; a batch is cut into M micro-batches that flow forward
//! and back by send/recv in the schedule's order (pipeline_options.hpp);
//! the micro-batches' gradients are summed in order and each stage updates
//! its slice (M = 1: bitwise one replica). D data-parallel copies sum a
//! stage's gradients in copy order; T tensor-parallel members per stage hold
//! shards (lane ((d S + s) T + t)). It knows no layers, only the
//! ModelProgram's stage API (execution/program.hpp).
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
#include <strata/policy/placement.hpp>
#include <strata/gradient/clip_norm.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/execution/executor.hpp>
#include <strata/parallel/pipeline/pipeline_buckets.hpp>
#include <strata/parallel/pipeline/pipeline_lanes.hpp>
#include <strata/parallel/pipeline/pipeline_options.hpp>
#include <strata/parallel/pipeline/pipeline_profile.hpp>
#include <strata/parallel/pipeline/pipeline_stage.hpp>
#include <strata/parallel/pipeline/pipeline_threads.hpp>
#include <strata/execution/state_slices.hpp>
#include <strata/parallel/tensor/tensor_peers.hpp>

namespace strata::detail {

template <class Transport>
class PipelineExecutor final : public Executor {
  using Link = typename Transport::link_type;

 public:
  //! `eo`: the strategy's compression and bucket_bytes (the copies' sum).
  PipelineExecutor(Transport t, ModelProgram& program, PipelineOptions opts, PipelineStats& stats,
                   const ExecutorOptions& eo = {})
      : tr_(std::move(t)), program_(program), opts_(std::move(opts)), stats_(stats), eo_(eo) {}
  // The lanes' programs and updaters hold memory of the computes: they go first (members in reverse order).
  ~PipelineExecutor() override = default;

  [[nodiscard]] bool placed() const noexcept override { return placed_; }
  //! The whole model's variables (across ranks: the other stages' as of the
  //! last training pass's end); GPU stages' read back from their memory.
  [[nodiscard]] const Tensor<float>& value() const override {
    ln_.read_back();
    return ln_.value;
  }
  void assign(const Tensor<float>& v) override {
    std::copy_n(v.data(), ln_.value.size(), ln_.value.data());
    ln_.stale = false;
    if (ln_.own) ln_.upload(ln_.copies.begin);
  }
  [[nodiscard]] bool is_chief() const noexcept override { return tr_.is_chief(); }
  //! In words: the copies' sum (compressed, by buckets) and, T > 1, what the stages' members split.
  [[nodiscard]] std::string collectives_choice() const override {
    std::string c = eo_.compression == Compression::None ? std::string()
                    : "each copy's gradient rounded to " + std::string(to_string(eo_.compression)) +
                          " for the copies' sum (error feedback)";
    if (auto b = bk_.words(eo_.bucket_bytes, ln_.lanes.size()); !b.empty()) c += (c.empty() ? "" : "; ") + b;
    if (ln_.T == 1 || !placed_) return c;
    return program_.describe_tensor_split(static_cast<int>(ln_.T), ranges_) + " (within each of " +
           std::to_string(ranges_.size()) + " pipeline stages)" + (c.empty() ? c : "; " + c);
  }
  [[nodiscard]] bool state_settled_between_steps() const noexcept override { return Transport::settled; }

  //! Collective across ranks: every rank starts from rank 0's `init`.
  void place(const Tensor<float>& init) override {
    placed_ = false;
    const std::size_t R = tr_.size(), D = opts_.data_parallel, T = opts_.tensor_parallel;
    check_pipeline_lanes(R, D, T, Transport::words);
    Transport::check(opts_);
    const std::size_t S = R / (D * T);
    ln_.T = T;
    counts_ = program_.layer_param_counts();
    widths_ = program_.layer_output_widths();
    cuts_ = program_.cuts();
    ranges_ = opts_.stages.empty() ? balance_stages(counts_, S, cuts_) : opts_.stages;
    check_stages(ranges_, program_.num_layers(), S, cuts_);
    if (opts_.micro_batches == 0) throw Error("pipeline: micro_batches is 0; a batch needs at least one micro-batch");
    if (opts_.balance == Balance::Measured && !opts_.stages.empty())
      throw Error("pipeline: stages given by hand and Balance::Measured; give one or the other");
    profiled_ = opts_.balance != Balance::Measured;
    ln_.value = init;
    ln_.stale = false;
    tr_.place(S, D, T, ln_.value);  // across ranks: rank 0's
    remote_ = tr_.copies().size() < D || tr_.stages().size() < S || tr_.members().size() < T;
    if (tr_.device(tr_.copies().begin, tr_.stages().begin, tr_.members().begin).is_gpu() && !profiled_)
      throw Error("pipeline: Balance::Measured times the layers on the host; stages on GPUs need the stages given "
                  "or balanced by parameters (Balance::Parameters)");
    updaters_.clear();
    ln_.reset(D, S, T, tr_.copies(), tr_.stages(), tr_.members(),
              [&](std::size_t d, std::size_t s, std::size_t t) { return tr_.device(d, s, t); }, tr_.matmul());
    layout();
    placed_ = true;
    reset_optimizer();
  }

  //! The optimizer's global_clipnorm (0: none).
  [[nodiscard]] float clipnorm() const {
    const std::size_t j = ln_.here.begin * ln_.T + ln_.members.begin;
    return updaters_.size() > j && updaters_[j] ? updaters_[j]->global_clipnorm() : 0.f;
  }

  void reset_optimizer() override {
    updaters_.clear();
    state_.clear();
    opt_slots_ = 0;
    ln_.place_compression(eo_.compression);  // the residual goes with the optimizer's state
    if (!placed_ || !program_.compiled()) return;
    updaters_.resize(ln_.segs.size());
    ln_.for_here([&](std::size_t s, std::size_t t) {
      const std::size_t j = s * ln_.T + t, n = segments_size(ln_.segs[j]);
      kernels::Compute* c = ln_.lanes[ln_.copies.begin][j].c;
      updaters_[j] = c ? program_.make_updater_on(*c, n) : program_.make_updater(n);
    });
    opt_slots_ = updaters_[ln_.here.begin * ln_.T + ln_.members.begin]->state().size();
    if (remote_)  // the other stages' slices, as of the last training pass's end
      for (std::size_t k = 0; k < opt_slots_; ++k) state_.emplace_back(Shape{ln_.value.size()});
  }

  //! Every stage's (member's) parts joined (across ranks: the others' as of the last training pass's end).
  std::vector<Tensor<float>> optimizer_state() override {
    if (updaters_.empty()) return {};
    const std::span<const std::vector<TensorSegment>> parts(ln_.segs);
    return join_state_segments(ln_.value.size(), parts, [&](std::size_t j) {
      return updaters_[j] ? updaters_[j]->state() : state_segments(state_, ln_.segs[j]);
    });
  }
  //! The whole state (as every rank loads a checkpoint); each stage here keeps its slice.
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (updaters_.empty()) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    if (remote_ && slots.size() != state_.size())
      throw ShapeError("set_optimizer_state: " + std::to_string(slots.size()) + " slots for an optimizer of " +
                       std::to_string(state_.size()));
    check_state_slots(slots, ln_.value.size());
    ln_.place_compression(eo_.compression);  // not in checkpoints: a resumed run's residual starts at zero
    for (std::size_t k = 0; k < state_.size(); ++k) std::copy_n(slots[k].data(), ln_.value.size(), state_[k].data());
    ln_.for_here([&](std::size_t s, std::size_t t) {
      updaters_[s * ln_.T + t]->set_state(state_segments(slots, ln_.segs[s * ln_.T + t]));
    });
  }

  PassTotals run_pass(Pass& pass) override {
    pass.runs_gradient_hook = true;  // on each lane's gradient, before the copies are summed
    PassTotals t = detail::run_batches(pass, program_.num_metrics(),
                                       [&](const Batch& b, std::size_t index, PassTotals& tt) { step(b, pass, tt, index); });
    if (pass.phase == Phase::Train) {
      ln_.for_here([&](std::size_t s, std::size_t t) {  // the stages here, for the others
        if (state_.empty()) return;
        const auto mine = updaters_[s * ln_.T + t]->state();
        for (std::size_t k = 0; k < mine.size(); ++k)
          move_segments(ln_.segs[s * ln_.T + t], state_[k].span(), const_cast<Tensor<float>&>(mine[k]).span(),
                        true);
      });
      ln_.read_back();  // lanes with buffers of their own: the host copy current
      tr_.end_pass(ln_.value, state_, ln_.segs, stats_);
    }
    return t;
  }

 private:
  using clock = std::chrono::steady_clock;

  //! The stages' parameter slices, and the lanes here over them.
  void layout() {
    slices_ = stage_param_slices(ranges_, counts_, stats_);
    ln_.layout(program_, ranges_, slices_);
    // the copies' sum by buckets where it travels: a rank's one lane (CPU or GPU), its copies on other ranks
    bk_.plan(program_.variable_shapes(), slices_[ln_.here.begin], ln_.segs[ln_.here.begin * ln_.T + ln_.members.begin],
             ln_.T, ln_.members.begin, requires { tr_.copies_link(); } && ln_.lanes.size() > 1 ? eo_.bucket_bytes : 0);
  }

  //! Balance::Measured (every stage here), on the first training batch:
  //! each layer's time on the first micro-batch, alone; then the split by
  //! those times (the optimizer state kept). Nothing trains.
  void profile(const Batch& b, std::size_t global, std::size_t m, std::int64_t it) {
    const std::size_t steps = std::max<std::size_t>(1, opts_.profile_steps);
    ln_.read_back();
    const std::vector<double> t = measure_layers(program_, ln_.value.span(), counts_, b, shard_range(global, m, 0),
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
    const std::size_t D = ln_.lanes.size(), S = ranges_.size();
    if (train && !profiled_) profile(b, global, std::min(opts_.micro_batches, global), *pass.iteration);
    PipelineBatch pb = plan_batch(pass.phase, train && pass.finite, global, D, S, opts_.micro_batches,
                                  program_.num_metrics());
    // copy 0 has the most rows
    check_stage_budgets(opts_, ranges_, slices_, widths_, program_.input_width(), opt_slots_,
                        shard_range(pb.share[0].size(), pb.m[0], 0).size(), pb.m[0], train, stats_);
    for (std::size_t d = ln_.copies.begin; d < ln_.copies.end; ++d)
      ln_.for_here([&](std::size_t s, std::size_t t) {
        ln_.lanes[d][s * ln_.T + t].stage->set_slots(
            train ? in_flight(opts_.schedule, s, S, std::max<std::size_t>(1, pb.m[d])) : 1);
      });
    if (pass.phase == Phase::Predict) pb.predictions = std::span<float>(b.predictions, global * widths_.back());
    tr_.prepare(pb);
    const std::int64_t it = *pass.iteration;
    bad_ = 0;
    try {
      tr_.run([&](auto& ctx, std::size_t d, std::size_t s, std::size_t t) { lane(ctx, pb, b, d, s, t, it, pass); });
    } catch (...) {
      for (auto& copy : ln_.lanes)  // a GPU may still run what a failed step queued
        for (StageLane& L : copy) settle(L);
      bk_.drop();
      throw;
    }
    if (train && ln_.own) ln_.stale = true;
    if (train && ln_.gpu) {
      if (bad_ == 0 && ln_.copies.size() > 1) {  // the other copies here take copy 0's updated variables (host-staged)
        ln_.read_back();
        ln_.upload(ln_.copies.begin + 1);
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

  //! Member t of stage s of copy d on its share of the batch (its
  //! neighbours: lanes T away, member t of stages s - 1 and s + 1), then its
  //! part of the update. The measurements are copy 0's member 0's; the
  //! results and predictions member 0's (the others' go to scratch).
  //! A custom loop's hook (Pass::gradient_hook) sees the lane's gradient
  //! (its stage's slice, its copy's rows; a GPU stage's staged on the host)
  //! before the copies are summed (on the host: copy 0 uploads the sum).
  template <class Ctx>
  void lane(Ctx& ctx, PipelineBatch& pb, const Batch& b, std::size_t d, std::size_t s, std::size_t t,
            std::int64_t it, const Pass& pass) {
    const auto start = clock::now();
    const std::size_t j = s * ln_.T + t;
    StageLane& L = ln_.lanes[d][j];
    const BoundThread bound(*L.m);  // this thread issues the lane's calls: its GPU current
    const std::size_t S = pb.stages, D = pb.copies();
    const bool train = pb.phase == Phase::Train;
    PipelineStats::Stage* stat = d == 0 && t == 0 ? &stats_.stages[s] : nullptr;
    if (ln_.groups[d][j]) ln_.groups[d][j]->bind(tr_.link(ctx));
    Batch mine = b;  // a member other than 0 predicts into scratch
    ReplicaResult* results = pb.results.data() + pb.first[d];
    if (t != 0) {
      L.results.assign(pb.m[d], ReplicaResult{});
      results = L.results.data();
      if (b.predictions) L.predictions.resize(pb.predictions.size()), mine.predictions = L.predictions.data();
    }
    StageWork w{.s = s,
                .S = S,
                .me = static_cast<int>((d * S + s) * ln_.T + t),
                .stride = static_cast<int>(ln_.T),
                .schedule = opts_.schedule,
                .phase = pb.phase,
                .share = pb.share[d],
                .m = pb.m[d],
                .global = pb.global,
                .it = it,
                .results = results,
                .stat = stat,
                .staged = ln_.gpu ? L.m : nullptr,
                .last = nullptr};
    const std::span<float> g = L.gradient();
    // where the lane's final gradient is read: a CPU stage's in place; a GPU stage's on the host when staged
    const bool staged = train && ln_.gpu && (pass.gradient_hook || D > 1 || ln_.T > 1 || L.comp.on());
    if (staged) L.host = Tensor<float>{Shape{g.size()}};
    const std::span<float> hg = ln_.gpu ? L.host.span() : g;
    double count = 0;
    const bool buckets = train && bk_.on() && !pass.gradient_hook;  // (a hook sees the whole gradient first)
    if constexpr (requires { tr_.copies_link(); })
      if (buckets)  // a GPU stage's buckets fetched to the host as each starts
        w.last = bk_.begin(hg, L.comp, static_cast<int>(D), pb.check ? &count : nullptr, tr_.copies_link(),
                           ln_.gpu ? CopyBuckets::Fetch([&L, hg, g](std::size_t lo, std::size_t hi) {
                             L.m->download(hg.data() + lo, g.data() + lo, (hi - lo) * sizeof(float));
                           })
                                   : CopyBuckets::Fetch());
    double busy = run_stage_batch(ctx, *L.stage, mine, w);
    const Range r = slices_[s];
    const auto timed = [&](auto&& fn) { add_seconds(busy, fn); };
    if (train)
      timed([&] {
        if (pb.m[d] == 0) L.m->fill(g.data(), 0.f, g.size());  // an empty share: a zero gradient
        if (!buckets || pb.m[d] == 0) L.stage->finish_gradient(static_cast<int>(D));  // its share of the L2 gradient
        if (staged && !buckets && !g.empty()) L.m->download(hg.data(), g.data(), g.size_bytes());
        if (pass.gradient_hook) {  // a member's: its shard, in its own layout (as tensor parallelism's replicas)
          ReplicaGradient rg{hg, ln_.T == 1 ? r.begin : 0, ln_.T == 1 ? ln_.value.size() : hg.size(), w.me,
                             static_cast<int>(D * S * ln_.T), pb.share[d].size(), pb.global, it};
          pass.gradient_hook(rg);
          if (ln_.gpu && D == 1 && !g.empty()) L.m->upload(g.data(), hg.data(), g.size_bytes());
        }
        if (buckets) return bk_.finish();  // (each bucket counted, compressed, summed as backward ended it)
        if (pb.check) count = ln_.gpu && !staged ? count_nonfinite(L) : ln_.nonfinite(j, hg);
        if (L.comp.on()) L.comp.compress(hg, 0);  // (after the hook: it sees FP32)
      });
    double bad = tr_.agree(ctx, pb, d, s, t, count);  // (with copies: every copy's gradient final)
    if (train && bad == 0 && L.comp.on()) {  // the copies' sum in 16 bits, checked after it (an fp16 sum may overflow)
      count = 0;
      if (d == ln_.copies.begin)
        timed([&] {
          if (!buckets) ln_.sum_compressed(d, j, hg, [&](auto w) { tr_.sum_copies(s, t, w); });
          if (ln_.gpu && !g.empty()) L.m->upload(g.data(), hg.data(), g.size_bytes());
          if (pb.check) count = ln_.nonfinite(j, hg);
        });
      if (pb.check) bad = tr_.sum_lanes(ctx, count);  // the same decision on every lane
      if (bad == 0) L.comp.commit();
    }
    if (d == ln_.copies.begin && s == ln_.here.begin && t == ln_.members.begin) bad_ = bad;
    const float clip = train && bad == 0 ? clipnorm() : 0.f;
    if (train && bad == 0 && d == ln_.copies.begin)
      timed([&] {
        if (D > 1 && !L.comp.on()) {  // on the host (a GPU stage's staged there; by buckets: summed already)
          if (!buckets) ln_.sum_copies(d, j, hg, [&](std::span<float> x) { tr_.sum_copies(s, t, x); });
          if (ln_.gpu && !g.empty()) L.m->upload(g.data(), hg.data(), g.size_bytes());
        }
        if (!g.empty() && clip == 0.f) updaters_[j]->apply(L.values(), g, 0, it);
      });
    if (clip > 0.f)  // clipping by the global norm: over every stage's layers (L.bad: the scratch of a GPU stage)
      timed([&] {
        double mine_sq = 0;  // copy 0 counts (a member: its own elements, member 0 the replicated ones too)
        if (d == 0 && ln_.T == 1) mine_sq = square_sum_in(L.c, g, L.bad);
        else if (d == 0)
          mine_sq = ln_.counted_sum(j, hg, [&](std::span<const float> x) { return square_sum_in(nullptr, x, L.bad); });
        const double sq = tr_.sum_lanes(ctx, mine_sq);
        if (d != ln_.copies.begin) return;
        clip_in(L.c, g, sq, clip, L.bad);
        if (!g.empty()) updaters_[j]->apply(L.values(), g, 0, it);
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
  ExecutorOptions eo_;  // compression: the copies' sum in 16 bits; bucket_bytes: by buckets, bk_, where it travels
  CopyBuckets bk_;
  bool placed_ = false;
  bool remote_ = false;  // some lanes run elsewhere (other ranks)
  std::vector<std::size_t> counts_, widths_;
  std::vector<char> cuts_;  // per layer: whether a stage may start there (program_.cuts())
  std::vector<Range> ranges_, slices_;  // per stage: its layers, its parameters
  PipelineLanes<Link> ln_;              // the lanes here: their variables, gradients, programs, groups
  std::vector<std::unique_ptr<Updater>> updaters_;                        // [s * T + t], the lanes here
  std::vector<Tensor<float>> state_;  // remote_: every stage's optimizer slots (the others' as of a pass end)
  std::size_t opt_slots_ = 0;
  bool profiled_ = true;  // Balance::Measured: whether the layers were timed and split by it
  double bad_ = 0;        // this step's non-finite gradient values (written by the first lane here)
};

}  // namespace strata::detail
