#pragma once
//! ReplicaContext: what the function given to Strategy::run receives. It
//! names the replica and offers the collectives of its team, using the
//! strategy's reduce policy unless another algorithm is named.
//!   strategy.run([](auto& ctx) { ctx.all_reduce(grad, strata::Mean); });

#include <utility>

#include <strata/comm/threads/communicator.hpp>

namespace strata {

template <AllReduceAlgorithm Algo>
class ReplicaContext {
 public:
  using all_reduce_algorithm = Algo;

  explicit ReplicaContext(ThreadCommunicator comm) : comm_(comm) {}

  //! This replica's id, 0 .. num_replicas_in_sync() - 1.
  [[nodiscard]] int replica_id_in_sync_group() const noexcept { return comm_.rank(); }
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return comm_.size(); }
  //! The communicator, to name an algorithm explicitly or reach every collective.
  [[nodiscard]] ThreadCommunicator& communicator() noexcept { return comm_; }

  template <MutableBuffer R, ReduceOperation Op>
  void all_reduce(R&& data, Op op) { comm_.all_reduce(std::forward<R>(data), op, Algo{}); }
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
  void all_reduce(In&& in, Out&& out, Op op) { comm_.all_reduce(std::forward<In>(in), std::forward<Out>(out), op, Algo{}); }
  template <MutableBuffer R>
  void broadcast(R&& data, int root) { comm_.broadcast(std::forward<R>(data), root); }
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
  void reduce_scatter(In&& in, Out&& out, Op op) { comm_.reduce_scatter(std::forward<In>(in), std::forward<Out>(out), op); }
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
  void reduce_to_one(In&& in, Out&& out, int root, Op op) {
    comm_.reduce_to_one(std::forward<In>(in), std::forward<Out>(out), root, op);
  }
  template <Buffer In, MutableBuffer Out>
  void all_gather(In&& in, Out&& out) { comm_.all_gather(std::forward<In>(in), std::forward<Out>(out)); }
  void barrier() { comm_.barrier(); }

 private:
  ThreadCommunicator comm_;
};

}  // namespace strata
