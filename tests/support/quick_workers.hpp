#pragma once
// MultiWorkerMirroredStrategy options for tests under mpirun: one timeout,
// short enough that a failure is reported in a test's time, for the MPI
// exchange between workers and among a worker's replicas alike.
#include <chrono>

#include <strata/strategy/multi_worker.hpp>

namespace strata_test {

inline strata::MultiWorkerOptions quick_workers(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  strata::MultiWorkerOptions o;
  o.mpi.timeout = timeout;
  o.local.timeout = timeout;
  return o;
}

}  // namespace strata_test
