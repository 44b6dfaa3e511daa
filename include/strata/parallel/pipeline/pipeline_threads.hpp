#pragma once
//! The pipeline executor's transport over threads (pipeline_executor.hpp):
//! every lane of the pipeline runs in this process, lane (copy d, stage s,
//! member t) on replica (d * S + s) * T + t of the strategy (one thread
//! each, Strategy::run),
//! talking through the replica contexts' send/recv. The copies' gradients
//! are already here (the executor sums them in copy order); the lanes' one
//! all-reduce of the finiteness count (a float) is also the barrier after
//! which every copy's gradient is final, so it runs when training with the
//! check or with copies. Results and predictions are written in place by
//! the last stages. A stage that throws releases the others from their
//! recv (the thread team's abort): the run ends with ReplicaError naming
//! that stage's replica. Lane (d, s, t) runs on the strategy's device
//! (d * S + s) * T + t (CPUs, or GPUs: PipelineStrategy{{gpu(0), gpu(1)}});
//! a stage's members sum over the same replica contexts.
//!   strata::detail::PipelineExecutor<strata::detail::ThreadStages<S>> ex{ThreadStages<S>{s}, program, opts, stats};

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace.hpp>
#include <strata/device/device.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/parallel/pipeline/pipeline_options.hpp>
#include <strata/parallel/pipeline/pipeline_stage.hpp>
#include <strata/device/tensor_group.hpp>

namespace strata::detail {

template <class Strat>
class ThreadStages {
 public:
  explicit ThreadStages(Strat& s) : s_(s) {}

  using link_type = typename Strat::context_type;  //!< what a stage's members sum over

  //! Names this thread's track in the trace after its lane (once).
  void name_lane(std::size_t d, std::size_t s, std::size_t t) const {
    std::string name = "stage " + std::to_string(s);
    if (T_ > 1) name += " member " + std::to_string(t);
    if (D_ > 1) name += " copy " + std::to_string(d);
    if (trace::thread_name() != name) trace::name_thread(std::move(name));
  }

  static constexpr PipelineWords words{"pipeline", "replicas", "give"};
  static constexpr bool settled = true;  //!< every stage's state is here, current after each step
  static void check(const PipelineOptions& /*o*/) {}
  [[nodiscard]] std::size_t size() const { return static_cast<std::size_t>(s_.num_replicas_in_sync()); }
  [[nodiscard]] bool is_chief() const noexcept { return true; }

  void place(std::size_t S, std::size_t D, std::size_t T, Tensor<float>& /*value*/) { S_ = S, D_ = D, T_ = T; }
  //! Where lane (d, s, t) runs, and a GPU stage's matrix products.
  [[nodiscard]] Device device(std::size_t d, std::size_t s, std::size_t t) const {
    return s_.devices().at((d * S_ + s) * T_ + t);
  }
  [[nodiscard]] MatmulPrecision matmul() const { return s_.executor_options().matmul; }
  //! The lanes here: every copy of every stage.
  [[nodiscard]] Range copies() const noexcept { return {0, D_}; }
  [[nodiscard]] Range stages() const noexcept { return {0, S_}; }
  [[nodiscard]] Range members() const noexcept { return {0, T_}; }
  //! Where a stage's members reach each other: their replica contexts.
  static link_type& link(link_type& ctx) noexcept { return ctx; }

  void prepare(PipelineBatch& /*pb*/) {}
  //! `lane(ctx, d, s, t)` for every lane, each on its replica's thread.
  template <class Lane>
  void run(Lane&& lane) {
    s_.run([&](auto& ctx) {
      const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
      const std::size_t d = r / (S_ * T_), s = r / T_ % S_, t = r % T_;
      if (trace::enabled()) name_lane(d, s, t);
      lane(ctx, d, s, t);
    });
  }
  //! Every lane's: the finiteness count over all of them (every replica or none: the same decision everywhere).
  template <class Ctx>
  double agree(Ctx& ctx, PipelineBatch& pb, std::size_t /*d*/, std::size_t /*s*/, std::size_t /*t*/, double count) {
    if (pb.phase != Phase::Train || !(pb.check || D_ > 1)) return 0;
    float bad[1] = {static_cast<float>(count)};
    ctx.all_reduce(std::span<float>(bad), Sum);  // with copies, also: every copy's gradient is final
    return bad[0];
  }
  //! Every lane's: the sum of the lanes' `local` (clipping's squared norms, a compressed sum's non-finite
  //! count), one all-reduce of a double.
  template <class Ctx>
  double sum_lanes(Ctx& ctx, double local) {
    double v[1] = {local};
    ctx.all_reduce(std::span<double>(v), Sum);
    return v[0];
  }
  //! The copies' gradients of stage s (member t) are all here: nothing to add.
  template <class T>
  void sum_copies(std::size_t /*s*/, std::size_t /*t*/, std::span<T> /*g*/) {}
  void end_pass(Tensor<float>& /*value*/, std::vector<Tensor<float>>& /*state*/,
                const std::vector<std::vector<TensorSegment>>& /*parts*/, PipelineStats& /*stats*/) {}

 private:
  Strat& s_;
  std::size_t S_ = 1, D_ = 1, T_ = 1;
};

}  // namespace strata::detail
