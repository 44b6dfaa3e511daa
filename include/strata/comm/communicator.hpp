#pragma once
//! The Communicator concept: what every backend's communicator offers (the
//! thread team's ThreadCommunicator, MPI's (comm/mpi/), the device team's,
//! NCCL's), and what ReplicaContext carries and executors use; and
//! AsyncCommunicator, the same with non-blocking collectives.
//!   static_assert(strata::Communicator<strata::ThreadCommunicator>);
//!   comm.send(activations, /*peer=*/1, /*tag=*/7);  comm.recv(grads, 1, 8);
//!
//! The contract, common to every model of the concept:
//! - collectives (all_reduce in place and out of place, broadcast,
//!   reduce_scatter, all_gather, barrier) are called by every rank in the
//!   same order with agreeing arguments; a disagreement raises
//!   CollectiveMismatch naming the ranks, a rank that never arrives raises
//!   CollectiveTimeout naming it, within the communicator's timeout;
//! - send(data, peer, tag) / recv(data, peer, tag) move one message between
//!   two ranks, matched by (source, destination, tag) in order; the sizes and
//!   element types of a matching pair must agree (else CollectiveMismatch on
//!   the receiver naming the peer, the tag and both sizes); a recv that is
//!   not matched within the timeout raises CollectiveTimeout naming the peer
//!   and the tag; a send never waits longer than the timeout either.
//!
//! AsyncCommunicator adds the non-blocking forms of the collectives
//! (all_reduce_async in place and out of place, broadcast_async,
//! reduce_scatter_async, all_gather_async, barrier_async), each returning a
//! strata::Work (comm/work.hpp) at once:
//!   strata::Work w = comm.all_reduce_async(bucket, strata::Sum);  ...;  w.wait();
//! - a rank's operations run in the order it issued them, blocking and
//!   non-blocking alike (a blocking call waits for the queued ones first), so
//!   the collective order above is the issue order;
//! - the result is bitwise the blocking form's, and a failure is the very
//!   typed error the blocking form raises (naming the missing or failed
//!   peer), thrown by Work::wait() / test();
//! - the buffers belong to the operation until its Work says it ended;
//! - Work::wait() is bounded by the communicator's timeout for each
//!   operation queued ahead and its own, plus a margin; a failed peer (an
//!   abort) ends pending work at once with CollectiveAborted.
//! ThreadCommunicator, MPI's communicator, the device team's DeviceCommunicator
//! and NcclCommunicator model it (the GPU ones: a Work is an event recorded
//! after the stream's operation, polled under the deadline: cuda/comm/event_work.hpp).

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
