#pragma once
//! Run-time knobs of the MPI communicator: plain values, not types.

#include <chrono>
#include <cstddef>
#include <string>

namespace strata {

//! Options of an MPI communicator and of its collectives.
//!   auto comm = strata::MpiCommunicator::world({.timeout = std::chrono::seconds(30)});
struct MpiOptions {
  //! A collective that cannot complete within this time raises
  //! CollectiveTimeout on every rank that waits, naming the ranks that never
  //! arrived and the last collective each completed.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  //! Ring all-reduce: bytes of one chunk (one ring step moves one chunk)...
  std::size_t ring_chunk_bytes = std::size_t{1} << 20;
  //! ...sent as this many messages, so that reducing one overlaps receiving the next.
  int ring_pipeline = 4;
  //! AutoReduce (see MpiCommunicator::auto_choice; docs/performance.md has the
  //! measurements behind the defaults): the direct algorithm at or below
  //! these many bytes, in shared memory and over a network (TCP). Up to
  //! 4056 bytes its data travels in the contract's own message, so the
  //! contract costs no extra exchange...
  std::size_t direct_max_bytes_shm = 4056;
  std::size_t direct_max_bytes_net = std::size_t{256} << 10;
  //! With auto_tune, direct up to 4056 bytes (what fits in the contract's
  //! message) and above that, measured: the first calls of each size class
  //! (powers of two) try the algorithms in `tune_rounds` interleaved rounds
  //! (native, ring, direct, native, ...; more rounds for small sizes), the
  //! ranks take the minimum of each trial's time over the ranks, and every
  //! rank applies the same rule (comm/mpi/algorithm_choice.hpp): native is
  //! kept unless another is at least 15% faster in its median and its best
  //! time and won at least 2 of 3 rounds; in doubt (fewer than 3 rounds, a
  //! bad time), native. Costs nothing at construction; the trials
  //! are real all-reduces (correct results), some with a slower algorithm.
  //! Reduction order then depends on the measurement: name an algorithm
  //! where bitwise run-to-run reproducibility matters.
  bool auto_tune = true;
  int tune_rounds = 3;
  //! Without auto_tune: the ring at or above these many bytes (0 = never)...
  std::size_t ring_min_bytes_shm = std::size_t{32} << 20;
  std::size_t ring_min_bytes_net = std::size_t{4} << 20;
  //! ...and MPI_Allreduce (after the contract's exchange) in between.
  //! Names an algorithm to use always ("ring", "direct", "native"); empty:
  //! the environment variable STRATA_MPI_ALLREDUCE, else by size as above.
  std::string force_algorithm{};
};

}  // namespace strata
