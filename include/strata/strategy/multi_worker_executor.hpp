#pragma once
//! The executor of MultiWorkerMirroredStrategy: the mirrored executor
//! (strategy/mirrored_executor.hpp) whose synchronous loop also spans
//! processes. These are its cross-worker steps, over the MPI communicator
//! between workers: every worker starts from the chief's variables
//! (broadcast), agrees on each global batch when it reads its own share of
//! the data (sharded by file), and sums the pass's logs and the predictions
//! of every worker. Gradients cross workers inside the replicas' own
//! all-reduce (hierarchical: see strategy/multi_worker.hpp).
//!   strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2)};   // under mpirun
//!   auto model = s.scope([] { return strata::nn::Sequential{...}; });  // trains through it

#include <span>

#include <strata/comm/mpi/communicator.hpp>
#include <strata/comm/reduce_op.hpp>

namespace strata::detail {

//! The workers of a MultiWorkerMirroredStrategy, as the synchronous loop
//! uses them. Every call is collective over the workers.
class MpiWorkers {
 public:
  explicit MpiWorkers(MpiCommunicator& comm) : comm_(&comm) {}
  [[nodiscard]] int size() const noexcept { return comm_->size(); }
  [[nodiscard]] int index() const noexcept { return comm_->rank(); }
  //! Elementwise sum over the workers, in place.
  void sum(std::span<double> v) { comm_->all_reduce(v, Sum); }
  void sum(std::span<float> v) { comm_->all_reduce(v, Sum); }
  //! Every worker receives the chief's values.
  void broadcast(std::span<float> v) { comm_->broadcast(v, 0); }

 private:
  MpiCommunicator* comm_;
};

}  // namespace strata::detail
