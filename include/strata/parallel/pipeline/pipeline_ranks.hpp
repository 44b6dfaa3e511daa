#pragma once
//! The pipeline executor's transport over the ranks of a job joined by a
//! WorkerCommunicator (comm/workers.hpp; MPI's under mpirun), for
//! MultiWorkerPipelineStrategy (pipeline_executor.hpp): rank
//! (d S + s) T + t runs the one lane (member t of stage s of copy d) on
//! copy d's share of each batch. Activations and their gradients travel by
//! send_async / recv; after the backward one all-reduce carries the
//! finiteness count and every copy's results (every rank logs the same),
//! the copies of a stage sum their gradients, and each updates its slice.
//! Other stages' state is broadcast from their copy 0 at each training
//! pass's end, so value() is the whole model's. A lane's own error reaches
//! every rank as an abort notice.
//!   strata::detail::PipelineExecutor<strata::detail::RankStages<Comm>> ex{RankStages<Comm>{comm}, program, opts, stats};

#include <algorithm>
#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/comm/workers.hpp>
#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace.hpp>
#include <strata/device/device.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/parallel/pipeline/pipeline_executor.hpp>
#include <strata/parallel/pipeline/pipeline_options.hpp>
#include <strata/parallel/pipeline/pipeline_stage.hpp>
#include <strata/device/tensor_group.hpp>

namespace strata::detail {

template <WorkerCommunicator Comm>
class RankStages {
 public:
  explicit RankStages(Comm& comm, Device device = cpu(0), MatmulPrecision matmul = {})
      : comm_(&comm), device_(device), matmul_(matmul) {}

  static constexpr PipelineWords words{"pipeline across ranks", "ranks", "start"};
  static constexpr bool settled = false;  //!< other stages' state reaches this rank at pass ends only
  static void check(const PipelineOptions& o) {
    if (o.balance == Balance::Measured)
      throw Error("pipeline across ranks: Balance::Measured is not supported yet; give the stages or balance "
                  "parameters");
  }
  [[nodiscard]] std::size_t size() const { return static_cast<std::size_t>(comm_->size()); }
  [[nodiscard]] bool is_chief() const noexcept { return comm_->rank() == 0; }

  //! Collective: every rank starts from rank 0's `value`; the copies of this lane get a communicator.
  void place(std::size_t S, std::size_t D, std::size_t T, Tensor<float>& value) {
    const auto r = static_cast<std::size_t>(comm_->rank());
    t_ = r % T, s_ = r / T % S, d_ = r / (S * T);
    S_ = S, T_ = T;
    comm_->broadcast(value.span(), 0);
    copies_comm_.reset();
    if (D > 1) copies_comm_.emplace(comm_->split(static_cast<int>(s_ * T + t_), static_cast<int>(d_)));
  }
  //! Where this rank's lane runs, and a GPU stage's matrix products.
  [[nodiscard]] Device device(std::size_t /*d*/, std::size_t /*s*/, std::size_t /*t*/) const { return device_; }
  [[nodiscard]] MatmulPrecision matmul() const { return matmul_; }
  //! The one lane here.
  [[nodiscard]] Range copies() const noexcept { return {d_, d_ + 1}; }
  [[nodiscard]] Range stages() const noexcept { return {s_, s_ + 1}; }
  [[nodiscard]] Range members() const noexcept { return {t_, t_ + 1}; }

  //! Predicting, the rows this rank does not compute are zero for the sum.
  void prepare(PipelineBatch& pb) { std::fill(pb.predictions.begin(), pb.predictions.end(), 0.f); }
  template <class Lane>
  void run(Lane&& lane) {
    Link link{*comm_};
    if (trace::enabled()) {  // this rank's track in the trace is its lane's
      std::string name = "stage " + std::to_string(s_) + (T_ > 1 ? " member " + std::to_string(t_) : "") +
                         (copies_comm_ ? " copy " + std::to_string(d_) : "");
      if (trace::thread_name() != name) trace::name_thread(std::move(name));
    }
    try {
      lane(link, d_, s_, t_);
    } catch (const CollectiveError& e) {
      // a wait that failed: the job's failure, already known to the others (or named by them); the
      // copies, which may be waiting for this lane in a gradient bucket's sum, hear it too
      tell_copies(e.what());
      throw;
    } catch (const std::exception& e) {
      // this lane's own error (a layer's, labels out of range): every other rank's wait ends with it
      const std::string why = "rank " + std::to_string(comm_->rank()) + " (stage " + std::to_string(s_) +
                              (T_ > 1 ? " member " + std::to_string(t_) : std::string()) + " of copy " +
                              std::to_string(d_) + "): " + e.what();
      comm_->abort(why);
      tell_copies(why);
      throw;
    }
  }
  //! One all-reduce over the job: [non-finite count, then per copy and
  //! micro-batch: loss, rows, metrics]; every copy's results land in pb.
  //! Predicting, the predictions are summed too.
  template <class Ctx>
  double agree(Ctx& /*ctx*/, PipelineBatch& pb, std::size_t d, std::size_t s, std::size_t t, double count) {
    comm_->finish_sends();
    const std::size_t nm = pb.metrics, per = 2 + nm, all = pb.results.size();
    std::vector<double> v(1 + all * per, 0.0);
    v[0] = count;
    if (s + 1 == pb.stages && t == 0 && pb.phase != Phase::Predict)  // a copy's results: its last stage's member 0
      for (std::size_t i = pb.first[d]; i < pb.first[d + 1]; ++i) {
        const ReplicaResult& r = pb.results[i];
        double* o = v.data() + 1 + i * per;
        o[0] = r.loss;
        o[1] = static_cast<double>(r.rows);
        for (std::size_t k = 0; k < nm && k < r.metrics.size(); ++k) o[2 + k] = r.metrics[k];
      }
    comm_->all_reduce(std::span<double>(v), Sum);
    if (pb.phase == Phase::Predict) comm_->all_reduce(pb.predictions, Sum);
    if (pb.phase != Phase::Predict)
      for (std::size_t i = 0; i < all; ++i) {
        const double* o = v.data() + 1 + i * per;
        ReplicaResult& r = pb.results[i];
        r.loss = o[0];
        r.rows = static_cast<std::size_t>(o[1]);
        r.metrics.assign(o + 2, o + 2 + nm);
      }
    return v[0];
  }
  //! Every rank's: the sum of the ranks' `local` (clipping's squared norms, a compressed sum's non-finite
  //! count), one all-reduce over the job.
  template <class Ctx>
  double sum_lanes(Ctx& /*ctx*/, double local) {
    double v[1] = {local};
    comm_->all_reduce(std::span<double>(v), Sum);
    return v[0];
  }
  //! The D copies of stage s (member t) sum its gradient (float, or bf16/fp16 when compressed).
  template <class T>
  void sum_copies(std::size_t /*s*/, std::size_t /*t*/, std::span<T> g) {
    if (copies_comm_) copies_comm_->all_reduce(g, Sum);
  }
  //! The copies of this lane's stage (D > 1), for gradient buckets
  //! (pipeline_buckets.hpp): their sums start there without waiting.
  Comm& copies_link() { return *copies_comm_; }
  //! At a training pass's end: every lane's variables and optimizer state
  //! (`state`: this rank's part current; `parts[s * T + t]`: the elements of
  //! member t of stage s) from its copy 0 (rank s * T + t) to every rank
  //! (a replicated segment from member 0), and every stage's measurements.
  void end_pass(Tensor<float>& value, std::vector<Tensor<float>>& state,
                const std::vector<std::vector<TensorSegment>>& parts, PipelineStats& stats) {
    for (std::size_t j = 0; j < S_ * T_; ++j)
      for (const TensorSegment& g : parts[j]) {
        if (!g.length || (g.replicated && j % T_ != 0)) continue;
        comm_->broadcast(value.span().subspan(g.offset, g.length), static_cast<int>(j));
        for (auto& slot : state) comm_->broadcast(slot.span().subspan(g.offset, g.length), static_cast<int>(j));
      }
    std::vector<double> st(3 * S_, 0.0);
    if (d_ == 0 && t_ == 0) {
      const auto& mine = stats.stages[s_];
      st[3 * s_] = mine.busy_s, st[3 * s_ + 1] = mine.wall_s;
      st[3 * s_ + 2] = static_cast<double>(mine.peak_activation_bytes);
    }
    comm_->all_reduce(std::span<double>(st), Sum);
    for (std::size_t s = 0; s < S_; ++s) {
      stats.stages[s].busy_s = st[3 * s];
      stats.stages[s].wall_s = st[3 * s + 1];
      stats.stages[s].peak_activation_bytes = static_cast<std::size_t>(st[3 * s + 2]);
    }
  }

  //! What the stage loop speaks: sends leave at once (the neighbours'
  //! forward and backward messages cross), finished per batch.
  struct Link {
    Comm& c;
    void send(std::span<const float> d, int peer, int tag) { c.send_async(d, peer, tag); }
    void recv(std::span<float> d, int peer, int tag) { c.recv(d, peer, tag); }
  };
  using link_type = Link;
  static Link& link(Link& l) noexcept { return l; }

 private:
  //! A failed lane's copies stop waiting for it (their sums run on a communicator of their own).
  void tell_copies(const std::string& why) noexcept {
    if (!copies_comm_) return;
    try {
      copies_comm_->abort(why);
    } catch (...) {  // the failure being reported is the one that counts
    }
  }

  Comm* comm_;
  Device device_;
  MatmulPrecision matmul_;
  std::size_t S_ = 1, T_ = 1, s_ = 0, d_ = 0, t_ = 0;  // stages, members; this rank's stage, copy and member
  std::optional<Comm> copies_comm_;  // this stage's D copies (D > 1)
};

//! A pipeline's stages one to a rank (MultiWorkerPipelineStrategy; chosen
//! by parallel/dispatch.hpp, which wraps it in MultiWorkerExecutor).
template <class S>
std::unique_ptr<Executor> make_pipeline_on_ranks(S& s, ModelProgram& program) {
  using Comm = typename S::communicator_type;
  return std::make_unique<PipelineExecutor<RankStages<Comm>>>(
      RankStages<Comm>{s.communicator(), s.devices().front(), s.executor_options().matmul}, program, s.pipeline_options(),
      s.pipeline_stats(), s.executor_options());
}

}  // namespace strata::detail
