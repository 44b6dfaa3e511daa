#pragma once
//! BasicMultiWorkerPipelineStrategy<Comm> (MultiWorkerPipelineStrategy is
//! it over MPI's communicator: strategy/mpi.hpp, included by
//! strategy/multi_worker_pipeline.hpp): a model's layers split into stages
//! over the ranks of a job joined by a WorkerCommunicator (comm/workers.hpp;
//! an MPI job) (one stage per rank; with PipelineOptions::data_parallel = D,
//! D copies of an S-stage pipeline on D x S ranks), with the same options, schedules and results as
//! PipelineStrategy in one process: the same PipelineExecutor over ranks
//! (parallel/pipeline/pipeline_executor.hpp with parallel/pipeline/pipeline_ranks.hpp).
//!   strata::MultiWorkerPipelineStrategy s;                 // every rank of mpirun -np S
//!   s.pipeline_options().micro_batches = 4;                // before making the model in its scope
//!   auto model = s.scope([] { return nn::Sequential{...}; });
//!   model.fit(s.distribute(train), {.epochs = 5});         // every rank, the same data and seed
//!   strata::MultiWorkerPipelineStrategy g{strata::gpu(local_rank)};   // each rank's stage on its GPU
//! Over MPI: needs the strata-mpi dependency (STRATA_HAS_MPI).

#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/comm/workers.hpp>
#include <strata/parallel/data/multi_worker_executor.hpp>
#include <strata/parallel/pipeline/pipeline_executor.hpp>
#include <strata/parallel/pipeline/pipeline_options.hpp>
#include <strata/parallel/pipeline/pipeline_ranks.hpp>
#include <strata/strategy/surface.hpp>

namespace strata {

//! What MultiWorkerPipelineStrategy::run's function receives: this rank's
//! one replica, the collectives over the whole job.
template <WorkerCommunicator Comm>
class BasicMultiWorkerPipelineContext {
 public:
  explicit BasicMultiWorkerPipelineContext(Comm& c) : c_(c) {}
  [[nodiscard]] int replica_id_in_sync_group() const noexcept { return c_.rank(); }
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return c_.size(); }
  [[nodiscard]] int local_replica_id() const noexcept { return 0; }
  template <MutableBuffer R, ReduceOperation Op>
  void all_reduce(R&& data, Op op) {
    c_.all_reduce(std::forward<R>(data), op);
  }
  void reduce_to_one(std::span<const float> in, std::span<float> out, int root, SumOp) {
    std::vector<float> tmp(in.begin(), in.end());
    c_.all_reduce(tmp, Sum);
    if (c_.rank() == root) {
      if (out.size() != tmp.size())
        throw ShapeError("reduce_to_one: the root's output holds " + std::to_string(out.size()) +
                         " elements but the inputs " + std::to_string(tmp.size()));
      std::copy(tmp.begin(), tmp.end(), out.begin());
    }
  }
  void barrier() { c_.barrier(); }

 private:
  Comm& c_;
};

template <WorkerCommunicator Comm>
class BasicMultiWorkerPipelineStrategy : public detail::StrategySurface<BasicMultiWorkerPipelineStrategy<Comm>> {
 public:
  using sync_policy = Synchronous;
  using placement_policy = Pipeline;
  static constexpr bool across_workers = true;  // parallel/dispatch.hpp: its stages on ranks, in MultiWorkerExecutor
  using reduce_policy = NoReduce;
  using context_type = BasicMultiWorkerPipelineContext<Comm>;
  using communicator_type = Comm;
  static constexpr std::string_view name = "multi_worker_pipeline";

  //! Every rank of the job (Comm::world; MPI: of MPI_COMM_WORLD) runs one stage (collective: every rank
  //! constructs it).
  explicit BasicMultiWorkerPipelineStrategy(typename Comm::Options opts = {}) : comm_(Comm::world(opts)) {}
  //! The same, this rank's stage on `stage_device` (a GPU: its variables,
  //! optimizer state and activations there; activations cross ranks through host memory).
  explicit BasicMultiWorkerPipelineStrategy(Device stage_device, typename Comm::Options opts = {})
      : comm_(Comm::world(opts)), device_(stage_device) {}
  //! The ranks of `ranks` (for example a split of the world).
  explicit BasicMultiWorkerPipelineStrategy(Comm ranks, Device stage_device = cpu(0))
      : comm_(std::move(ranks)), device_(stage_device) {}

  //! One replica per rank: stages x data-parallel copies.
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return comm_.size(); }
  [[nodiscard]] int num_workers() const noexcept { return comm_.size(); }
  [[nodiscard]] int worker_index() const noexcept { return comm_.rank(); }
  //! This rank's stage's device.
  [[nodiscard]] std::vector<Device> devices() const { return {device_}; }
  [[nodiscard]] Comm& communicator() noexcept { return comm_; }

  //! How models made in this strategy's scope are split and run (as PipelineStrategy's).
  [[nodiscard]] PipelineOptions& pipeline_options() noexcept { return options_; }
  //! Per stage, over the training steps (every rank's copy after each training pass).
  [[nodiscard]] PipelineStats& pipeline_stats() noexcept { return stats_; }

  //! Runs `fn(ctx)` on this rank's replica; returns what it returned (one value).
  template <std::invocable<context_type&> F>
  auto run(F&& fn) {
    context_type ctx{comm_};
    using R = std::invoke_result_t<F&, context_type&>;
    if constexpr (std::is_void_v<R>) {
      fn(ctx);
    } else {
      std::vector<R> one;
      one.push_back(fn(ctx));
      return PerReplica<R>(std::move(one));
    }
  }

 private:
  Comm comm_;
  Device device_ = cpu(0);
  PipelineOptions options_;
  PipelineStats stats_;
};

}  // namespace strata
