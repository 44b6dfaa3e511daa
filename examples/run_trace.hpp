// --trace FILE: the run's timeline (strata::trace, issue 24) while the
// examples train and evaluate: trace-event JSON that ui.perfetto.dev and
// chrome://tracing open. Under mpirun (a strategy over an MPI
// communicator) every rank records, the chief merges the ranks into FILE
// on its clock (every rank must be given --trace: examples/job_checks.hpp
// checks it); parameter servers across ranks: the chief alone records and
// writes; in one process, one recording. Off without --trace. One process
// writes FILE, always.
//   example::RunTrace trace(args.trace, strategy);  ... fit, evaluate ...;  trace.finish();
#pragma once

#include <optional>
#include <string>
#include <type_traits>

#include <strata/core/trace_session.hpp>
// MPI where the program is built with it (the MNIST examples; not linear_regression)
#if STRATA_HAS_MPI && __has_include(<mpi.h>)
#define EXAMPLE_TRACE_MPI 1
#include <strata/comm/mpi/trace_session.hpp>
#else
#define EXAMPLE_TRACE_MPI 0
#endif

namespace example {

class RunTrace {
 public:
  template <class S>
  RunTrace(const std::string& path, S& strategy) {
    if (path.empty()) return;
#if EXAMPLE_TRACE_MPI
    if constexpr (requires { { strategy.communicator() } -> std::same_as<strata::MpiCommunicator&>; }) {
      mpi_.emplace(strategy.communicator(), strata::trace::Options{.path = path});
      return;
    }
#endif
    // a strategy of several processes without a communicator to merge over (parameter servers across
    // ranks): the chief alone records and writes FILE, the other processes leave it alone
    if (strategy.any().worker_index() != 0) return;
    local_.emplace(strata::trace::Options{.path = path});
  }
  //! Writes the file (under mpirun: collective, every rank calls it).
  void finish() {
    if (local_) local_->finish();
#if EXAMPLE_TRACE_MPI
    if (mpi_) mpi_->finish();
#endif
  }

 private:
  std::optional<strata::trace::Session> local_;
#if EXAMPLE_TRACE_MPI
  std::optional<strata::trace::MpiSession> mpi_;
#endif
};

}  // namespace example
