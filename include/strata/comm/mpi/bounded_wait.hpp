#pragma once
//! The one bounded wait of strata's MPI code: the MPI communicator's calls
//! (Exchange::wait_until: collectives, send and recv) and the headerless
//! messages the parameter servers exchange through it (point_to_point.hpp)
//! all poll here, under a deadline, each with its own checks and its own
//! CollectiveTimeout naming what it awaited.
//!   if (!poll_until(deadline, Pace::busy, [&] { return test(); }, [&] { check_notices(); }))
//!     throw CollectiveTimeout("strata: ... timed out after ... ms: rank 2 never arrived");

#include <chrono>
#include <thread>

#include <strata/comm/mpi/notices.hpp>

namespace strata::detail::mpi {

//! How a wait spaces its looks: `busy` when the peers are expected within
//! microseconds (a collective's; it yields the core only after a long while),
//! `patient` when a message may be a training step away (a parameter
//! server's: after 64 looks it sleeps 20 us between looks, leaving the cores
//! to the ranks that compute).
enum class Pace { busy, patient };

//! The one bounded wait of strata's MPI code (the communicator's calls, the
//! parameter servers' messages): looks at `ready()` until it returns true,
//! then returns true; every 16th look lets another thread waiting for the
//! MPI lock in (SerialMpi::let_others_in), calls `checks()` (abort notices,
//! the interrupt flag: it may throw) and returns false once `deadline` has
//! passed, for the caller to raise its CollectiveTimeout naming what it
//! awaited.
template <class Ready, class Checks>
[[nodiscard]] bool poll_until(std::chrono::steady_clock::time_point deadline, Pace pace, Ready ready, Checks checks) {
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 15) == 15) {  // fast waits never pay for these checks
      SerialMpi::let_others_in();  // another thread's MPI calls, between two looks
      checks();
      if (std::chrono::steady_clock::now() > deadline) return false;
    }
    if (pace == Pace::busy) relax(i);
    else if (i > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace strata::detail::mpi
