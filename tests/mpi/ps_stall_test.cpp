// The parameter server's set-up across processes with a rank that stops
// responding (SIGSTOP) before it: the others raise CollectiveTimeout naming
// it within the timeout instead of waiting forever, then resume it
// (SIGCONT) so that the job ends. 3 ranks: chief 0, server 1, worker 2;
// the server is the one stopped.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include <strata/ps/mpi.hpp>

#include "world_pids.hpp"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

namespace ps_stall_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

TEST_CASE("setting up the parameter servers: a stopped rank is named by the others within the timeout") {
  const auto world = strata_test::world_pids();
  const int rank = world.rank, size = world.size;
  const std::vector<int>& pids = world.pids;
  REQUIRE(size == 3);
  constexpr auto timeout = 2s;
  const auto make = [&] {
    strata::ParameterServerOptions o;
    o.timeout = timeout;
    strata::MpiParameterServers rt{strata::ClusterSpec::from_counts(1, size), o};
  };
  if (rank == 1) {
    std::raise(SIGSTOP);  // resumed by rank 0 once it has given up
    try {
      make();  // the others are gone by now: its own deadline ends it
    } catch (const strata::CollectiveError&) {
    }
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
      make();
    } catch (const strata::CollectiveTimeout& e) {
      what = e.what();
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    if (rank == 0) kill(static_cast<pid_t>(pids[1]), SIGCONT);
    CAPTURE(what);
    CHECK(what.find("creating an MPI communicator timed out after 2000 ms") != std::string::npos);
    // an MPI_Comm_idup cannot tell who is missing: the others are named, the stopped rank among them
    CHECK(what.find(rank == 0 ? "some of rank(s) 1, 2 did not take part" : "some of rank(s) 0, 1 did not take part") !=
          std::string::npos);
    CHECK(took >= timeout);
    CHECK(took < timeout + 3s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace ps_stall_test
