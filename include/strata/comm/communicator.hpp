#pragma once
//! The Communicator concept: what every backend's communicator offers (the
//! thread team's ThreadCommunicator, MpiCommunicator, later NCCL), and what
//! ReplicaContext carries and executors use.
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

#include <concepts>
#include <span>

#include <strata/comm/reduce_op.hpp>

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

}  // namespace strata
