#pragma once
//! The executor of MultiWorkerPipelineStrategy: a pipeline whose stages are
//! the ranks of an MPI job. With D data-parallel copies of S stages on
//! D x S ranks, rank d * S + s runs stage s of copy d, on copy d's share of
//! each batch (every rank reads the same batches; stage 0 takes the
//! features, the last stage the labels). Activations and their gradients
//! travel by the communicator's send_async / recv (strategy/pipeline_stage.hpp
//! runs the schedule, as in one process). After the backward, one all-reduce
//! over the job carries the finiteness check's count and every copy's
//! per-micro-batch results (so every rank logs the same loss and metrics,
//! summed in the same order as in one process); the D copies of a stage then
//! sum their gradients (an all-reduce among them) and each applies the update
//! to its stage's slice: the same step as PipelineStrategy in one process
//! (bitwise for one copy, or two). A rank holds its own stage's variables
//! and optimizer state current; the others' are broadcast from their copy 0
//! at the end of every training pass, so value() and optimizer_state() are
//! the whole model's there (checkpoints are taken at epoch ends).
//! Predictions are summed over the job (each row is computed by one rank).
//! A stage's own error (a layer's, labels out of range) is sent to every
//! other rank as an abort notice: their waits end at once with
//! CollectiveAborted carrying it, and the communicator is unusable after.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/mpi/communicator.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/host/maps.hpp>
#include <strata/strategy/executor.hpp>
#include <strata/strategy/pipeline_options.hpp>
#include <strata/strategy/pipeline_stage.hpp>

namespace strata::detail {

class MpiPipelineExecutor final : public Executor {
 public:
  MpiPipelineExecutor(MpiCommunicator& comm, ModelProgram& program, PipelineOptions opts, PipelineStats& stats)
      : comm_(comm), program_(program), opts_(std::move(opts)), stats_(stats) {}

  [[nodiscard]] bool placed() const noexcept override { return stage_ != nullptr; }
  //! The whole model's variables as of the last training pass's end (this
  //! rank's own stage: current).
  [[nodiscard]] const Tensor<float>& value() const override { return value_; }
  void assign(const Tensor<float>& v) override { std::copy_n(v.data(), value_.size(), value_.data()); }
  [[nodiscard]] bool is_chief() const noexcept override { return comm_.rank() == 0; }
  //! Other stages' state reaches this rank at pass ends only.
  [[nodiscard]] bool state_settled_between_steps() const noexcept override { return false; }

  //! Collective: every rank starts from rank 0's `init`.
  void place(const Tensor<float>& init) override {
    const auto R = static_cast<std::size_t>(comm_.size());
    const std::size_t D = opts_.data_parallel;
    if (D == 0) throw Error("pipeline: data_parallel is 0; give 1 for one pipeline, D for D copies of it");
    if (R % D)
      throw Error("pipeline across ranks: " + std::to_string(R) + " ranks do not make data_parallel = " +
                  std::to_string(D) + " copies of a pipeline: start D x S ranks for D copies of S stages");
    if (opts_.balance == Balance::Measured)
      throw Error("pipeline across ranks: Balance::Measured is not supported yet; give the stages or balance "
                  "parameters");
    if (opts_.micro_batches == 0) throw Error("pipeline: micro_batches is 0; a batch needs at least one micro-batch");
    const std::size_t S = R / D;
    copies_ = D;
    s_ = static_cast<std::size_t>(comm_.rank()) % S;
    d_ = static_cast<std::size_t>(comm_.rank()) / S;
    counts_ = program_.layer_param_counts();
    widths_ = program_.layer_output_widths();
    ranges_ = opts_.stages.empty() ? balance_stages(counts_, S) : opts_.stages;
    check_stages(ranges_, program_.num_layers(), S);
    value_ = init;
    comm_.broadcast(value_.span(), 0);
    grad_ = Tensor<float>{Shape{init.size()}};
    slices_ = stage_param_slices(ranges_, counts_, stats_);
    const Range mine = slices_[s_];
    stage_ = program_.make_stage(ranges_[s_], value_.span().subspan(mine.begin, mine.size()),
                                 grad_.span().subspan(mine.begin, mine.size()));
    if (D > 1) copies_comm_.emplace(comm_.split(static_cast<int>(s_), static_cast<int>(d_)));
    reset_optimizer();
  }

  void reset_optimizer() override {
    updater_.reset();
    state_.clear();
    if (!stage_ || !program_.compiled()) return;
    updater_ = program_.make_updater(slices_[s_].size());
    for (std::size_t k = 0; k < updater_->state().size(); ++k) state_.emplace_back(Shape{value_.size()});
  }

  //! Every stage's optimizer state as of the last training pass's end.
  std::vector<Tensor<float>> optimizer_state() override { return state_; }
  //! Every rank is given the whole state (as every rank loads a checkpoint); it keeps its stage's slice.
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (!updater_) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    if (slots.size() != state_.size())
      throw ShapeError("set_optimizer_state: " + std::to_string(slots.size()) + " slots for an optimizer of " +
                       std::to_string(state_.size()));
    std::vector<Tensor<float>> part;
    const Range r = slices_[s_];
    for (std::size_t k = 0; k < slots.size(); ++k) {
      if (slots[k].size() != value_.size())
        throw ShapeError("set_optimizer_state: a slot of " + std::to_string(slots[k].size()) + " elements for " +
                         std::to_string(value_.size()) + " parameters");
      std::copy_n(slots[k].data(), value_.size(), state_[k].data());
      Tensor<float> p{Shape{r.size()}};
      std::copy_n(slots[k].data() + r.begin, r.size(), p.data());
      part.push_back(std::move(p));
    }
    updater_->set_state(part);
  }

  PassTotals run_pass(Pass& pass) override {
    PassTotals t = detail::run_batches(pass, program_.num_metrics(),
                                       [&](const Batch& b, std::size_t index, PassTotals& tt) { step(b, pass, tt, index); });
    if (pass.phase == Phase::Train) share_state();
    return t;
  }

 private:
  //! What a send/recv-speaking stage loop needs: sends leave at once (the
  //! neighbours' forward and backward messages cross), finished per batch.
  struct Link {
    MpiCommunicator& c;
    void send(std::span<const float> d, int peer, int tag) { c.send_async(d, peer, tag); }
    void recv(std::span<float> d, int peer, int tag) { c.recv(d, peer, tag); }
  };

  void step(const Batch& b, Pass& pass, PassTotals& t, std::size_t index) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const std::size_t global = b.x->shape()[0];
    if (global == 0) return;
    const bool train = pass.phase == Phase::Train;
    const std::size_t S = ranges_.size(), D = copies_, nm = program_.num_metrics();
    std::vector<std::size_t> ms(D), first(D + 1, 0);
    for (std::size_t d = 0; d < D; ++d) {
      ms[d] = std::min(opts_.micro_batches, shard_range(global, D, d).size());
      first[d + 1] = first[d] + ms[d];
    }
    const Range share = shard_range(global, D, d_);
    const std::size_t m = ms[d_];
    const std::size_t opt_slots = state_.size();
    check_stage_budgets(opts_, ranges_, slices_, widths_, program_.input_width(), opt_slots,
                        shard_range(shard_range(global, D, 0).size(), ms[0], 0).size(), ms[0], train, stats_);
    stage_->set_slots(train ? in_flight(opts_.schedule, s_, S, std::max<std::size_t>(1, m)) : 1);
    std::vector<ReplicaResult> results(m);
    const bool last = s_ + 1 == S;
    const std::size_t out_w = widths_.back();
    if (pass.phase == Phase::Predict) std::fill_n(b.predictions, global * out_w, 0.f);
    PipelineStats::Stage* stat = d_ == 0 ? &stats_.stages[s_] : nullptr;
    const std::int64_t it = *pass.iteration;
    Link link{comm_};
    const StageWork w{.s = s_,
                      .S = S,
                      .me = comm_.rank(),
                      .schedule = opts_.schedule,
                      .phase = pass.phase,
                      .share = share,
                      .m = m,
                      .global = global,
                      .it = it,
                      .results = results.data(),
                      .stat = stat};
    double busy = 0;
    try {
      busy = run_stage_batch(link, *stage_, b, w);
      comm_.finish_sends();
    } catch (const CollectiveError&) {
      throw;  // a wait that failed: the job's failure, already known to the others (or named by them)
    } catch (const std::exception& e) {
      // this stage's own error (a layer's, labels out of range): every other rank's wait ends with it
      comm_.abort("rank " + std::to_string(comm_.rank()) + " (stage " + std::to_string(s_) + " of copy " +
                  std::to_string(d_) + "): " + e.what());
      throw;
    }

    // One all-reduce over the job: [non-finite count, then per copy and micro-batch: loss, rows, metrics].
    const std::size_t per = 2 + nm;
    std::vector<double> v(1 + first[D] * per, 0.0);
    const Range mine = slices_[s_];
    std::span<float> g = grad_.span().subspan(mine.begin, mine.size());
    if (train) {
      if (m == 0) std::fill(g.begin(), g.end(), 0.f);
      stage_->finish_gradient(static_cast<int>(D));  // this copy's share of the L2 gradient
      if (pass.finite) v[0] = static_cast<double>(kernels::host::count_nonfinite(g.data(), g.size()));
    }
    if (last && pass.phase != Phase::Predict)
      for (std::size_t i = 0; i < m; ++i) {
        double* o = v.data() + 1 + (first[d_] + i) * per;
        o[0] = results[i].loss;
        o[1] = static_cast<double>(results[i].rows);
        for (std::size_t k = 0; k < nm && k < results[i].metrics.size(); ++k) o[2 + k] = results[i].metrics[k];
      }
    comm_.all_reduce(std::span<double>(v), Sum);
    if (pass.phase == Phase::Predict) comm_.all_reduce(std::span<float>(b.predictions, global * out_w), Sum);
    const double bad = v[0];
    if (train && bad == 0.0) {
      const auto t0 = clock::now();
      if (copies_comm_) copies_comm_->all_reduce(g, Sum);
      if (mine.size()) updater_->apply(value_.span().subspan(mine.begin, mine.size()), g, 0, it);
      busy += std::chrono::duration<double>(clock::now() - t0).count();
    }
    if (pass.phase != Phase::Predict)
      for (std::size_t i = 0; i < first[D]; ++i) {  // copy, then micro-batch order: as in one process
        const double* o = v.data() + 1 + i * per;
        t.add(o[0], static_cast<std::size_t>(o[1]), std::span<const double>(o + 2, nm));
      }
    t.samples += global;
    if (stat) {
      stat->busy_s += busy;
      stat->wall_s += std::chrono::duration<double>(clock::now() - start).count();
    }
    if (!train) return;
    ++stats_.steps;
    if (pass.finite && bad > 0) return pass.skip_step(index, it, bad);
    pass.applied_step();
    ++*pass.iteration;
  }

  //! At a training pass's end: every stage's variables and optimizer state
  //! from its copy 0 (rank s) to every rank, and every stage's measurements.
  void share_state() {
    const std::size_t S = ranges_.size();
    if (updater_) {
      const auto mine = updater_->state();
      for (std::size_t k = 0; k < mine.size(); ++k)
        std::copy_n(mine[k].data(), mine[k].size(), state_[k].data() + slices_[s_].begin);
    }
    for (std::size_t s = 0; s < S; ++s) {
      const Range r = slices_[s];
      if (!r.size()) continue;
      comm_.broadcast(value_.span().subspan(r.begin, r.size()), static_cast<int>(s));
      for (auto& slot : state_) comm_.broadcast(slot.span().subspan(r.begin, r.size()), static_cast<int>(s));
    }
    std::vector<double> st(3 * S, 0.0);
    if (d_ == 0) {
      const auto& mine = stats_.stages[s_];
      st[3 * s_] = mine.busy_s, st[3 * s_ + 1] = mine.wall_s, st[3 * s_ + 2] = static_cast<double>(mine.peak_activation_bytes);
    }
    comm_.all_reduce(std::span<double>(st), Sum);
    for (std::size_t s = 0; s < S; ++s) {
      stats_.stages[s].busy_s = st[3 * s];
      stats_.stages[s].wall_s = st[3 * s + 1];
      stats_.stages[s].peak_activation_bytes = static_cast<std::size_t>(st[3 * s + 2]);
    }
  }

  MpiCommunicator& comm_;
  ModelProgram& program_;
  PipelineOptions opts_;
  PipelineStats& stats_;
  std::size_t copies_ = 1, s_ = 0, d_ = 0;  // copies; this rank's stage and copy
  std::vector<std::size_t> counts_, widths_;
  std::vector<Range> ranges_, slices_;  // per stage: its layers, its parameters
  Tensor<float> value_, grad_;
  std::unique_ptr<StageProgram> stage_;
  std::unique_ptr<Updater> updater_;
  std::vector<Tensor<float>> state_;  // every stage's optimizer slots (this stage's: as of the last share_state)
  std::optional<MpiCommunicator> copies_comm_;  // this stage's D copies (D > 1)
};

}  // namespace strata::detail
