#pragma once
//! ReplicaContext: what the function given to Strategy::run receives. It
//! names the replica and offers the collectives and the point-to-point
//! messages of its communicator (any strata::Communicator; the thread team's
//! by default), using the strategy's reduce policy unless another algorithm
//! is named.
//!   strategy.run([](auto& ctx) { ctx.all_reduce(grad, strata::Mean); });
//!   strategy.run([](auto& ctx) { if (ctx.replica_id_in_sync_group() == 0) ctx.send(x, 1, 0); });
//! Determinism: that of the communicator's calls (bitwise for the thread team).

#include <utility>

#include <strata/comm/communicator.hpp>
#include <strata/comm/threads/communicator.hpp>

namespace strata {

//! One replica's view of its strategy: its id, the replica count, and the
//! calls of communicator `Comm`, all-reduces through `Algo`.
//!   strata::ReplicaContext<strata::Direct> ctx{comm};   // Comm = ThreadCommunicator
//!   ctx.all_reduce(grad, strata::Sum);
template <AllReduceAlgorithm Algo, Communicator Comm = ThreadCommunicator>
class ReplicaContext {
 public:
  using all_reduce_algorithm = Algo;
  using communicator_type = Comm;

  explicit ReplicaContext(Comm comm) : comm_(std::move(comm)) {}

  //! This replica's id, 0 .. num_replicas_in_sync() - 1.
  [[nodiscard]] int replica_id_in_sync_group() const noexcept { return comm_.rank(); }
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return comm_.size(); }
  //! The communicator, to name an algorithm explicitly or reach every collective.
  [[nodiscard]] Comm& communicator() noexcept { return comm_; }

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
  //! Non-blocking forms, where the communicator has them (AsyncCommunicator):
  //! each returns a strata::Work; all-reduce uses the context's algorithm.
  //!   strata::Work w = ctx.all_reduce_async(grad, strata::Sum);  ...;  w.wait();
  template <MutableBuffer R, ReduceOperation Op>
    requires AsyncCommunicator<Comm>
  Work all_reduce_async(R&& data, Op op) { return comm_.all_reduce_async(std::forward<R>(data), op, Algo{}); }
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires AsyncCommunicator<Comm>
  Work all_reduce_async(In&& in, Out&& out, Op op) {
    return comm_.all_reduce_async(std::forward<In>(in), std::forward<Out>(out), op, Algo{});
  }
  template <MutableBuffer R>
    requires AsyncCommunicator<Comm>
  Work broadcast_async(R&& data, int root) { return comm_.broadcast_async(std::forward<R>(data), root); }
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires AsyncCommunicator<Comm>
  Work reduce_scatter_async(In&& in, Out&& out, Op op) {
    return comm_.reduce_scatter_async(std::forward<In>(in), std::forward<Out>(out), op);
  }
  template <Buffer In, MutableBuffer Out>
    requires AsyncCommunicator<Comm>
  Work all_gather_async(In&& in, Out&& out) {
    return comm_.all_gather_async(std::forward<In>(in), std::forward<Out>(out));
  }
  Work barrier_async()
    requires AsyncCommunicator<Comm>
  { return comm_.barrier_async(); }
  //! Point-to-point, as the communicator's send / recv (tagged, in order per peer and tag).
  template <Buffer B>
  void send(B&& data, int peer, int tag) { comm_.send(std::forward<B>(data), peer, tag); }
  template <MutableBuffer B>
  void recv(B&& data, int peer, int tag) { comm_.recv(std::forward<B>(data), peer, tag); }

 private:
  Comm comm_;
};

}  // namespace strata
