#pragma once
//! The pipeline executor's transport over threads (pipeline_executor.hpp):
//! every lane of the pipeline runs in this process, lane (copy d, stage s)
//! on replica d * S + s of the strategy (one thread each, Strategy::run),
//! talking through the replica contexts' send/recv. The copies' gradients
//! are already here (the executor sums them in copy order); the lanes' one
//! all-reduce of the finiteness count (a float) is also the barrier after
//! which every copy's gradient is final, so it runs when training with the
//! check or with copies. Results and predictions are written in place by
//! the last stages. A stage that throws releases the others from their
//! recv (the thread team's abort): the run ends with ReplicaError naming
//! that stage's replica. Lane (d, s) runs on the strategy's device
//! d * S + s (CPUs, or GPUs: PipelineStrategy{{gpu(0), gpu(1)}}).
//!   strata::detail::PipelineExecutor<strata::detail::ThreadStages<S>> ex{ThreadStages<S>{s}, program, opts, stats};

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace.hpp>
#include <strata/strategy/device.hpp>
#include <strata/strategy/device_compute.hpp>
#include <strata/strategy/pipeline_options.hpp>
#include <strata/strategy/pipeline_stage.hpp>

namespace strata::detail {

template <class Strat>
class ThreadStages {
 public:
  explicit ThreadStages(Strat& s) : s_(s) {}

  //! Names this thread's track in the trace after its lane (once).
  void name_lane(std::size_t d, std::size_t s) const {
    std::string name = "stage " + std::to_string(s);
    if (D_ > 1) name += " copy " + std::to_string(d);
    if (trace::thread_name() != name) trace::name_thread(std::move(name));
  }

  static constexpr PipelineWords words{"pipeline", "replicas", "give"};
  static constexpr bool settled = true;  //!< every stage's state is here, current after each step
  static void check(const PipelineOptions& /*o*/) {}
  [[nodiscard]] std::size_t size() const { return static_cast<std::size_t>(s_.num_replicas_in_sync()); }
  [[nodiscard]] bool is_chief() const noexcept { return true; }

  void place(std::size_t S, std::size_t D, Tensor<float>& /*value*/) { S_ = S, D_ = D; }
  //! Where lane (d, s) runs, and a GPU stage's matrix products.
  [[nodiscard]] Device device(std::size_t d, std::size_t s) const { return s_.devices().at(d * S_ + s); }
  [[nodiscard]] MatmulPrecision matmul() const { return s_.executor_options().matmul; }
  //! The lanes here: every copy of every stage.
  [[nodiscard]] Range copies() const noexcept { return {0, D_}; }
  [[nodiscard]] Range stages() const noexcept { return {0, S_}; }

  void prepare(PipelineBatch& /*pb*/) {}
  //! `lane(ctx, d, s)` for every lane, each on its replica's thread.
  template <class Lane>
  void run(Lane&& lane) {
    s_.run([&](auto& ctx) {
      const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
      if (trace::enabled()) name_lane(r / S_, r % S_);
      lane(ctx, r / S_, r % S_);
    });
  }
  //! Every lane's: the finiteness count over all of them (every replica or none: the same decision everywhere).
  template <class Ctx>
  double agree(Ctx& ctx, PipelineBatch& pb, std::size_t /*d*/, std::size_t /*s*/, double count) {
    if (pb.phase != Phase::Train || !(pb.check || D_ > 1)) return 0;
    float bad[1] = {static_cast<float>(count)};
    ctx.all_reduce(std::span<float>(bad), Sum);  // with copies, also: every copy's gradient is final
    return bad[0];
  }
  //! Every lane's: the sum of the lanes' `local` (clipping's squared norms), one all-reduce of a double.
  template <class Ctx>
  double sum_squares(Ctx& ctx, double local) {
    double v[1] = {local};
    ctx.all_reduce(std::span<double>(v), Sum);
    return v[0];
  }
  //! The copies' gradients of stage s are all here: nothing to add.
  void sum_copies(std::size_t /*s*/, std::span<float> /*g*/) {}
  void end_pass(Tensor<float>& /*value*/, std::vector<Tensor<float>>& /*state*/, const std::vector<Range>& /*slices*/,
                PipelineStats& /*stats*/) {}

 private:
  Strat& s_;
  std::size_t S_ = 1, D_ = 1;
};

}  // namespace strata::detail
