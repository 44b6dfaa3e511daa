#pragma once
//! The Communicator concept: what every backend's communicator offers (the
//! thread team's ThreadCommunicator, MPI's (comm/mpi/), the device team's,
//! NCCL's), and what ReplicaContext carries and executors use; and
//! AsyncCommunicator, the same with non-blocking collectives (`*_async`,
//! each returning a strata::Work: comm/work.hpp).
//!   static_assert(strata::Communicator<strata::ThreadCommunicator>);
//!   comm.send(activations, /*peer=*/1, /*tag=*/7);  comm.recv(grads, 1, 8);
//!   strata::Work w = comm.all_reduce_async(bucket, strata::Sum);  ...;  w.wait();
//! The contract every model keeps (collectives in the same order with
//! agreeing arguments, CollectiveMismatch / CollectiveTimeout naming the
//! ranks, send/recv matching, the async forms' order, errors, buffers and
//! deadlines): docs/collectives.md, "The communicator contract".

#include <concepts>
#include <span>

#include <strata/comm/reduce_op.hpp>
#include <strata/comm/work.hpp>

namespace strata {

template <class C>
concept Communicator = requires(C& c, std::span<float> f, std::span<const float> cf, int peer, int tag) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.all_reduce(f, Sum);
  c.all_reduce(cf, f, Sum);
  c.broadcast(f, 0);
  c.reduce_scatter(cf, f, Sum);
  c.all_gather(cf, f);
  c.barrier();
  c.send(cf, peer, tag);
  c.recv(f, peer, tag);
};

//! A Communicator with non-blocking collectives (see above).
//!   static_assert(strata::AsyncCommunicator<strata::ThreadCommunicator>);
template <class C>
concept AsyncCommunicator = Communicator<C> && requires(C& c, std::span<float> f, std::span<const float> cf) {
  { c.all_reduce_async(f, Sum) } -> std::same_as<Work>;
  { c.all_reduce_async(cf, f, Sum) } -> std::same_as<Work>;
  { c.broadcast_async(f, 0) } -> std::same_as<Work>;
  { c.reduce_scatter_async(cf, f, Sum) } -> std::same_as<Work>;
  { c.all_gather_async(cf, f) } -> std::same_as<Work>;
  { c.barrier_async() } -> std::same_as<Work>;
};

}  // namespace strata
