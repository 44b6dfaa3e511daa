#pragma once
//! Run-time knobs of the in-process communicator: plain values, not types.

#include <chrono>
#include <cstddef>

namespace strata {

//! Options of a team of CPU replicas and of its collectives.
//!   strata::CommOptions o{.timeout = std::chrono::seconds(10)};
struct CommOptions {
  //! A collective that cannot complete within this time raises
  //! CollectiveTimeout on every waiting replica, naming who is missing.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  //! Busy-wait iterations before a waiting replica blocks; negative picks
  //! automatically (long spins when every replica has a core, almost none
  //! when replicas outnumber cores so that waiting never burns a core).
  int spin = -1;
  //! Ring all-reduce: bytes of one chunk (one ring step moves one chunk).
  std::size_t ring_chunk_bytes = std::size_t{256} << 10;
  //! AutoReduce uses the ring at and above this many bytes per replica and
  //! the direct algorithm below it (0 = never the ring). See
  //! docs/performance.md for the measurements behind the default.
  std::size_t auto_ring_min_bytes = 0;
};

}  // namespace strata
