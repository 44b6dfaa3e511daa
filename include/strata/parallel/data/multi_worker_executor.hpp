#pragma once
//! The executor of MultiWorkerMirroredStrategy: the mirrored executor
//! (parallel/data/mirrored_executor.hpp) whose synchronous loop also spans
//! processes. These are its cross-worker steps, over the communicator
//! between workers (a WorkerCommunicator: comm/workers.hpp): the chief's variables broadcast, each global batch
//! agreed when workers read their own files, the pass's logs and
//! predictions summed, and at fit's start a run fingerprint
//! (MultiWorkerExecutor::begin_fit: another model, optimizer, batch or seed
//! stops every worker with a RunMismatch). Gradients cross workers inside
//! the replicas' own hierarchical all-reduce (strategy/multi_worker_basic.hpp).
//!   strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2)};   // under mpirun
//!   auto model = s.scope([] { return strata::nn::Sequential{...}; });  // trains through it

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/mpi/fingerprint.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/workers.hpp>
#include <strata/execution/executor.hpp>

namespace strata::detail {

//! The workers of a MultiWorkerMirroredStrategy, as the synchronous loop
//! uses them, over their communicator. Every call is collective over the workers.
template <WorkerCommunicator Comm>
class Workers {
 public:
  explicit Workers(Comm& comm) : comm_(&comm) {}
  [[nodiscard]] int size() const noexcept { return comm_->size(); }
  [[nodiscard]] int index() const noexcept { return comm_->rank(); }
  //! Elementwise sum over the workers, in place.
  void sum(std::span<double> v) { comm_->all_reduce(v, Sum); }
  void sum(std::span<float> v) { comm_->all_reduce(v, Sum); }
  //! Every worker receives the chief's values.
  void broadcast(std::span<float> v) { comm_->broadcast(v, 0); }

 private:
  Comm* comm_;
};

//! The executor of a MultiWorkerMirroredStrategy: the mirrored executor
//! (`inner`), with the run fingerprint agreed at fit's start. Everything
//! else is the inner executor's.
template <WorkerCommunicator Comm>
class MultiWorkerExecutor final : public ForwardingExecutor {
 public:
  MultiWorkerExecutor(std::unique_ptr<Executor> inner, Comm& comm, ModelProgram& program)
      : ForwardingExecutor(std::move(inner)), comm_(comm), program_(program) {}

  //! Fit's first batch (of a pass of its own: not trained on) tells the
  //! global batch; every worker compares its fingerprint with the others'
  //! under the workers' timeout (RunMismatch on every worker if any differ).
  bool begin_fit(Pass& pass) override {
    std::optional<Batch> first = pass.next();  // builds the model if needed (collective: every worker does)
    if (!first && !placed()) pass.empty();     // out of data here: build from the Input, as the others do
    std::optional<std::size_t> rows;  // the global batch
    if (first && first->x) rows.emplace(first->x->shape()[0]);
    auto fields = run_fingerprint(program_, rows, pass);
    // the workers' callbacks (and their collectives: logs, saves) run once per execution: alike everywhere
    fields.emplace_back("steps per execution", std::to_string(pass.steps_per_execution));
    detail::mpi::agree_on_run(comm_, fields, "fingerprint");
    return inner_->begin_fit(pass);
  }

  //! The layout is agreed first: the chief's value is broadcast only to
  //! workers whose model has its shape (else RunMismatch, not a contract error).
  void place(const Tensor<float>& init) override {
    std::vector<RunField> layout;
    for (auto& f : program_.describe_for_fingerprint())
      if (f.first == "parameter count" || f.first == "variable shapes") layout.push_back(std::move(f));
    detail::mpi::agree_on_run(comm_, layout, "fingerprint");
    inner_->place(init);
  }

 private:
  Comm& comm_;
  ModelProgram& program_;
};

//! `inner` with the run fingerprint agreed across workers at fit's start
//! (parallel/dispatch.hpp wraps every executor of a strategy across workers).
template <class S>
std::unique_ptr<Executor> across_workers(S& s, std::unique_ptr<Executor> inner, ModelProgram& program) {
  using Comm = typename S::communicator_type;
  return std::make_unique<MultiWorkerExecutor<Comm>>(std::move(inner), s.communicator(), program);
}

}  // namespace strata::detail
