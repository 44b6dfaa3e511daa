#pragma once
//! One pipeline batch, written once for every pipeline executor (threads in
//! one process, ranks of an MPI job): its bookkeeping (each copy's share of
//! the rows, its micro-batches, where their results go: PipelineBatch), the
//! stages' layout and memory budget, and one stage's share of it: the order
//! of its micro-batches' forwards and backwards under a schedule, and the
//! loop that runs them, receiving activations from the previous stage and
//! gradients from the next through any communicator with send/recv. A
//! stage on a GPU (StageLane with a compute) keeps its slice of the
//! variables, its gradient, optimizer state and activations in its GPU's
//! memory; its activations and their gradients cross to the neighbours
//! through host memory (the host-staged path, which every compute has:
//! downloaded by the sender, uploaded by the receiving stage). A
//! device-to-device path is later GPU work.
//!   auto pb = strata::detail::plan_batch(Phase::Train, true, rows, copies, stages, micro_batches, metrics);
//!   const double busy = strata::detail::run_stage_batch(ctx, stage, batch, work);
//!
//! The pipeline executor (pipeline_executor.hpp) is written once over a
//! Stages model (its Transport parameter):
//! ThreadStages (pipeline_threads.hpp: every lane in this process, one
//! replica thread each) and RankStages (pipeline_ranks.hpp: one lane per
//! MPI rank). It says which lanes run here (copies() x stages() x
//! members(), ranges), runs them (run: lane(ctx, d, s, t), ctx with
//! send/recv; link(ctx): what a stage's tensor-parallel members sum over,
//! of type link_type), joins them after the backward (agree: the
//! finiteness count, the results and predictions of the lanes elsewhere),
//! sums a lane's copies held elsewhere (sum_copies), sums a number over
//! every lane (sum_lanes: clipping's squared norms, a compressed copies'
//! sum's non-finite count) and shares the other lanes'
//! state at a pass's end (end_pass); and size(), words, check(options),
//! place, prepare, is_chief, settled, and device(d, s, t) and matmul()
//! (where lane (d, s, t) runs). Within a
//! process, the lowest copy of each stage here sums the copies here and
//! applies the update; the others read its variables.
//! Stages on GPUs (PipelineStrategy{{gpu(0), gpu(1)}}) run this very code,
//! each lane's variables, gradient, optimizer state and activations in its
//! compute's memory (StageLane, pipeline_stage.hpp); activations, their
//! gradients, and the copies' sums and updated variables cross through host
//! memory (host-staged). On the host's compute standing in for a GPU
//! (tests/device/host_as_gpu.hpp) a GPU pipeline gives the CPU pipeline's bits.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/parallel/pipeline/pipeline_options.hpp>
#include <strata/execution/program.hpp>

namespace strata::detail {

enum class StageOp : unsigned char { F, B };
struct StageTask {
  StageOp op;
  std::size_t m;  //!< the micro-batch
};

//! "F3" / "B3": a micro-batch's forward or backward, named in the trace
//! (core/trace.hpp; made once per thread and index).
inline const char* micro_name(StageOp op, std::size_t m) {
  thread_local std::vector<const char*> names[2];
  auto& v = names[op == StageOp::F ? 0 : 1];
  for (char b[24]; v.size() <= m;) {  // (snprintf: GCC 12 -O3 warns falsely on a "F" + std::string)
    std::snprintf(b, sizeof b, "%c%zu", op == StageOp::F ? 'F' : 'B', v.size());
    v.push_back(trace::intern(b));
  }
  return v[m];
}

//! Stage s of S's order of forwards and backwards of m micro-batches
//! (forwards only when not training).
inline std::vector<StageTask> stage_order(Schedule k, std::size_t s, std::size_t S, std::size_t m, bool train) {
  std::vector<StageTask> v;
  if (!train || k == Schedule::GPipe) {
    for (std::size_t i = 0; i < m; ++i) v.push_back({StageOp::F, i});
    if (train)
      for (std::size_t i = 0; i < m; ++i) v.push_back({StageOp::B, i});
  } else if (k == Schedule::Naive) {
    for (std::size_t i = 0; i < m; ++i) v.push_back({StageOp::F, i}), v.push_back({StageOp::B, i});
  } else {
    const std::size_t w = std::min(S - s - 1, m);
    for (std::size_t i = 0; i < w; ++i) v.push_back({StageOp::F, i});
    for (std::size_t i = 0; i + w < m; ++i) v.push_back({StageOp::F, w + i}), v.push_back({StageOp::B, i});
    for (std::size_t i = m - w; i < m; ++i) v.push_back({StageOp::B, i});
  }
  return v;
}

//! Each stage's slice of the flat parameters (stage s holds the layers
//! ranges[s], layer l has counts[l] parameters), in stage order; resets
//! `stats` to one entry per stage with its layers and parameter count.
inline std::vector<Range> stage_param_slices(const std::vector<Range>& ranges, const std::vector<std::size_t>& counts,
                                             PipelineStats& stats) {
  std::vector<Range> slices;
  stats.stages.assign(ranges.size(), {});
  for (std::size_t s = 0, off = 0; s < ranges.size(); ++s) {
    std::size_t n = 0;
    for (std::size_t l = ranges[s].begin; l < ranges[s].end; ++l) n += counts[l];
    slices.push_back(Range{off, off + n});
    stats.stages[s].layers = ranges[s];
    stats.stages[s].params = n;
    off += n;
  }
  return slices;
}

//! Bytes stage `s` holds running micro-batches of up to `rows` rows, `flight`
//! at a time: its input and each layer's output per row (`widths`, one per
//! layer), and on the last stage the loss's gradient, kept until backward.
inline std::size_t stage_activation_bound(const std::vector<Range>& ranges, const std::vector<std::size_t>& widths,
                                          std::size_t input_width, std::size_t s, std::size_t rows,
                                          std::size_t flight) {
  std::size_t w = s ? widths[ranges[s].begin - 1] : input_width;
  for (std::size_t l = ranges[s].begin; l < ranges[s].end; ++l) w += widths[l];
  if (s + 1 == ranges.size()) w += widths.back();
  return flight * rows * w * sizeof(float);
}

//! Before a batch runs: what each stage (layers `ranges`, parameters
//! `slices`) will hold against o.memory_budget_bytes, with micro-batches of up
//! to `rows` rows, m of them; records each stage's activation bound in
//! `stats`. Throws the first stage over budget, itemized. The same decision
//! on every replica and rank (no communication).
inline void check_stage_budgets(const PipelineOptions& o, const std::vector<Range>& ranges,
                                const std::vector<Range>& slices, const std::vector<std::size_t>& widths,
                                std::size_t input_width, std::size_t opt_slots, std::size_t rows, std::size_t m,
                                bool train, PipelineStats& stats) {
  const std::size_t S = ranges.size();
  for (std::size_t s = 0; s < S; ++s) {
    const std::size_t flight = train ? in_flight(o.schedule, s, S, m) : 1;
    const std::size_t act = stage_activation_bound(ranges, widths, input_width, s, rows, flight);
    const std::size_t n = slices[s].size() * sizeof(float);
    const std::size_t need = n * (3 + opt_slots) + act;  // values, gradient, micro-batch gradient, optimizer state
    if (s < stats.stages.size())
      stats.stages[s].bound_activation_bytes = std::max(stats.stages[s].bound_activation_bytes, act);
    if (o.memory_budget_bytes && need > o.memory_budget_bytes)
      throw Error("pipeline: stage " + std::to_string(s) + " (layers " + range_str(ranges[s]) + ") needs " +
                  std::to_string(need) + " bytes (parameters " + std::to_string(n) + ", gradients " +
                  std::to_string(2 * n) + ", optimizer state " + std::to_string(opt_slots * n) + ", activations of " +
                  std::to_string(flight) + " micro-batches of up to " + std::to_string(rows) + " rows in flight " +
                  std::to_string(act) + ") but has a budget of " + std::to_string(o.memory_budget_bytes) +
                  " bytes (PipelineOptions::memory_budget_bytes): split the model over more stages, use more "
                  "micro-batches, or the 1F1B schedule");
  }
}

//! One batch of `global` rows as the pipeline's copies run it: what every
//! lane (a copy's stage) and the transport joining them share.
struct PipelineBatch {
  Phase phase = Phase::Train;
  bool check = false;                  //!< training under the finiteness check: lanes count their gradient's
  std::size_t global = 0;              //!< the batch's rows (every loss is scaled by 1 / global)
  std::size_t stages = 1;              //!< S
  std::size_t metrics = 0;             //!< per result
  std::vector<Range> share;            //!< per copy: its contiguous, balanced share of the rows
  std::vector<std::size_t> m;          //!< per copy: its micro-batches (at most its rows: 0 for an empty share)
  std::vector<std::size_t> first;      //!< per copy, and one past the last: where its results start
  std::vector<ReplicaResult> results;  //!< per copy, then micro-batch: the last stage's loss and metrics
  std::span<float> predictions;        //!< Predict: the batch's, global x the output width
  [[nodiscard]] std::size_t copies() const noexcept { return share.size(); }
};

//! The bookkeeping of a batch of `global` rows over `copies` copies of
//! `stages` stages, each copy's share cut into up to `micro` micro-batches.
inline PipelineBatch plan_batch(Phase phase, bool check, std::size_t global, std::size_t copies, std::size_t stages,
                                std::size_t micro, std::size_t metrics) {
  PipelineBatch pb;
  pb.phase = phase, pb.check = check, pb.global = global, pb.stages = stages, pb.metrics = metrics;
  pb.first.assign(copies + 1, 0);
  for (std::size_t d = 0; d < copies; ++d) {
    pb.share.push_back(shard_range(global, copies, d));
    pb.m.push_back(std::min(micro, pb.share[d].size()));
    pb.first[d + 1] = pb.first[d] + pb.m[d];
  }
  pb.results.assign(pb.first[copies], ReplicaResult{});
  return pb;
}

//! How a transport words the replicas a pipeline runs on, in errors.
struct PipelineWords {
  const char* where;  //!< "pipeline"
  const char* unit;   //!< "replicas"
  const char* ask;    //!< "give"
};

//! That `R` replicas (ranks) make D copies of a pipeline whose stages are
//! split over T members: errors worded by `w` otherwise.
inline void check_pipeline_lanes(std::size_t R, std::size_t D, std::size_t T, const PipelineWords& w) {
  if (D == 0) throw Error("pipeline: data_parallel is 0; give 1 for one pipeline, D for D copies of it");
  if (T == 0) throw Error("pipeline: tensor_parallel is 0; give 1 for whole stages, T to split each over T replicas");
  if (T == 1 && R % D)
    throw Error(std::string(w.where) + ": " + std::to_string(R) + " " + w.unit + " do not make data_parallel = " +
                std::to_string(D) + " copies of a pipeline: " + w.ask + " D x S " + w.unit +
                " for D copies of S stages");
  if (R % (D * T))
    throw Error(std::string(w.where) + ": " + std::to_string(R) + " " + w.unit + " do not make data_parallel = " +
                std::to_string(D) + " copies of a pipeline whose stages are split over tensor_parallel = " +
                std::to_string(T) + ": " + w.ask + " D x S x T " + w.unit + " for D copies of S stages of T members");
}

//! What one stage runs of one batch.
struct StageWork {
  std::size_t s = 0, S = 1;  //!< this stage, of S
  int me = 0;                //!< its id among the peers: its neighbours are me - stride and me + stride
  int stride = 1;            //!< lanes between a stage's and the next's (tensor parallelism: T members each)
  Schedule schedule = Schedule::OneFOneB;
  Phase phase = Phase::Train;
  Range share;                         //!< the batch's rows this copy of the pipeline runs
  std::size_t m = 0;                   //!< micro-batches of them (0: none)
  std::size_t global = 0;              //!< the batch's rows (every loss is scaled by 1 / global)
  std::int64_t it = 0;                 //!< the optimizer iteration
  ReplicaResult* results = nullptr;    //!< m of them: the last stage's loss and metrics per micro-batch
  PipelineStats::Stage* stat = nullptr;  //!< where to record peak activations (null: not here)
  //! A GPU stage's memory: what it sends, and the predictions, are
  //! downloaded from there first (host-staged); null: a CPU stage.
  kernels::Memory* staged = nullptr;
  //! The last backward's (LastBackward): the gradient told as it becomes final; null: finished after.
  const LastBackward* last = nullptr;
};

//! One lane (a copy's stage) as the process running it holds it
//! (pipeline_executor.hpp): where it computes, its slice of the variables
//! and of the gradient there, and its stage program.
struct StageLane {
  kernels::Compute* c = nullptr;  //!< a GPU stage's compute (the executor owns it); null: a CPU stage
  kernels::Memory* m = nullptr;   //!< where its buffers live (a CPU stage: the host's memory)
  kernels::Buffer<float> value;   //!< its stage's variables (a CPU stage: a view of the executor's host copy)
  kernels::Buffer<float> grad;    //!< its stage's gradient for its copy's rows
  Tensor<float> host;             //!< a GPU stage's gradient staged on the host (the hook, the copies' sum)
  kernels::Buffer<double> bad;    //!< a GPU stage's finiteness count
  GradientCompression comp;       //!< ExecutorOptions::compression: its residual and 16-bit gradient (on the host)
  bool borrowed = false;          //!< `value` views another's (the executor's host copy, or copy 0's member)
  std::vector<ReplicaResult> results;  //!< a tensor-parallel member other than 0: its results, not reported
  std::vector<float> predictions;      //!< and its predictions
  std::unique_ptr<StageProgram> stage;
  [[nodiscard]] std::span<float> values() const noexcept { return {value.data(), value.size()}; }
  [[nodiscard]] std::span<float> gradient() const noexcept { return {grad.data(), grad.size()}; }
};

//! A GPU stage's count of NaN and infinite values in its gradient, counted in its memory.
inline double count_nonfinite(StageLane& L) {
  double n = 0;
  L.m->upload(L.bad.data(), &n, sizeof n);
  L.m->count_nonfinite(L.grad.data(), L.grad.size(), L.bad.data());
  L.m->download(&n, L.bad.data(), sizeof n);
  return n;
}

//! For its scope, the calling thread issues `m`'s calls (a GPU: its device
//! current; the host: nothing), then gets back what it had.
class BoundThread {
 public:
  explicit BoundThread(kernels::Memory& m) : m_(m), prev_(m.bind_thread()) {}
  BoundThread(const BoundThread&) = delete;
  BoundThread& operator=(const BoundThread&) = delete;
  ~BoundThread() { m_.unbind_thread(prev_); }

 private:
  kernels::Memory& m_;
  int prev_;
};

//! After a failed step: a GPU stage finishes what was queued (the failure
//! being reported is the one that counts, not one of this).
inline void settle(StageLane& L) noexcept {
  if (!L.c) return;
  try {
    const BoundThread bound(*L.m);
    L.m->synchronize();
  } catch (...) {
  }
}

//! Runs fn(), adding the seconds it took to `into` (a stage's busy time, a layer's measured time).
template <class F>
void add_seconds(double& into, F&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  into += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

//! Runs stage w.s's forwards and backwards of the batch `b` (activations in
//! with tag 0 from me - stride, out to me + stride; gradients back with tag 1); the
//! parameter gradients are left in the stage's gradient slice (the first
//! micro-batch writes, the others add). Returns the seconds it computed.
template <class Ctx>
double run_stage_batch(Ctx& ctx, StageProgram& st, const Batch& b, const StageWork& w) {
  double busy = 0;
  const auto timed = [&](auto&& fn) { add_seconds(busy, fn); };
  const bool train = w.phase == Phase::Train, last = w.s + 1 == w.S;
  const std::size_t slots = train ? in_flight(w.schedule, w.s, w.S, std::max<std::size_t>(1, w.m)) : 1;
  const std::size_t in_w = st.input_width(), out_w = st.output_width();
  std::vector<char> alive(slots, 0);
  std::vector<float> buf, sent;  // what arrives; a GPU stage's output or input gradient, on the host to be sent
  const auto to_host = [&](std::span<const float> v) -> std::span<const float> {
    if (!w.staged) return v;
    sent.resize(v.size());  // the host-staged path: download, send from host memory
    if (!v.empty()) w.staged->download(sent.data(), v.data(), v.size_bytes());
    return sent;
  };
  const auto held = [&] {
    if (!w.stat || !train) return;
    std::size_t n = 0;
    for (std::size_t k = 0; k < slots; ++k)
      if (alive[k]) n += st.activation_bytes(k);
    w.stat->peak_activation_bytes = std::max(w.stat->peak_activation_bytes, n);
  };
  const float scale = 1.f / static_cast<float>(w.global);
  for (const StageTask& task : stage_order(w.schedule, w.s, w.S, w.m, train)) {
    const Range part = shard_range(w.share.size(), w.m, task.m);
    const Range rows{w.share.begin + part.begin, w.share.begin + part.end};  // in the whole batch
    const std::size_t slot = task.m % slots;
    const StageStep info{w.phase, static_cast<int>(task.m), static_cast<std::uint64_t>(w.it), scale};
    if (task.op == StageOp::F) {
      const float* in = b.x->data() + rows.begin * in_w;
      if (w.s > 0) {
        buf.resize(rows.size() * in_w);
        ctx.recv(std::span<float>(buf), w.me - w.stride, 0);
        in = buf.data();
      }
      std::span<const float> out;
      timed([&] {
        trace::Span span{micro_name(StageOp::F, task.m), trace::Category::Forward,
                         {{"stage", w.s}, {"micro_batch", task.m}, {"rows", rows.size()}}};
        out = st.forward(slot, in, rows.size(), info);
      });
      alive[slot] = 1;
      held();
      if (!last) {
        ctx.send(to_host(out), w.me + w.stride, 0);
      } else if (w.phase == Phase::Predict) {
        if (!w.staged) std::copy(out.begin(), out.end(), b.predictions + rows.begin * out_w);
        else if (!out.empty()) w.staged->download(b.predictions + rows.begin * out_w, out.data(), out.size_bytes());
      } else {
        timed([&] {
          trace::Span span{"loss", trace::Category::Loss, {{"micro_batch", task.m}}};
          st.loss(slot, *b.y, rows, info, w.results[task.m]);
        });
        held();
      }
      if (!train) alive[slot] = 0;
      continue;
    }
    alive[slot] = 0;
    if (!st.has_backward()) continue;
    const float* dout = nullptr;
    if (!last) {
      buf.resize(rows.size() * out_w);
      ctx.recv(std::span<float>(buf), w.me + w.stride, 1);
      dout = buf.data();
    }
    std::span<const float> din;
    timed([&] {
      trace::Span span{micro_name(StageOp::B, task.m), trace::Category::Backward,
                       {{"stage", w.s}, {"micro_batch", task.m}}};
      din = st.backward(slot, dout, task.m == 0, task.m + 1 == w.m ? w.last : nullptr);  // (every schedule ends on m - 1)
    });
    if (w.s > 0 && st.has_input_gradient()) ctx.send(to_host(din), w.me - w.stride, 1);
  }
  return busy;
}

}  // namespace strata::detail
