// The parameter-server chief ending training while a worker rank is
// stopped (SIGSTOP): its CollectiveTimeout names the rank, its role and
// what it waited for. Alone in its process (3 ranks: chief 0, server 1,
// worker 2): ps_stall_test's set-up stall leaves MPI communicators behind.
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <csignal>
#include <span>
#include <string>
#include <vector>

#include <strata/ps/mpi.hpp>

#include "world_pids.hpp"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

namespace ps_end_stall_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

TEST_CASE("the chief ending training names the stopped rank that does not take the end, and what it waited for") {
  // 3 ranks: chief 0, server 1, worker 2. A run of steps completes; then the
  // worker is stopped (SIGSTOP) and the chief ends training with a value
  // too large to be sent without the receiver (MPI's rendezvous): the
  // chief's CollectiveTimeout names rank 2 as worker 0 (issue 21: it said
  // only "waited 2000 ms for the end of training sent to every rank").
  const auto world = strata_test::world_pids();
  const int rank = world.rank, size = world.size;
  const std::vector<int>& pids = world.pids;
  REQUIRE(size == 3);
  constexpr auto timeout = 2s;
  constexpr std::size_t n = std::size_t{1} << 20;  // 4 MiB: far above any eager limit
  strata::ParameterServerOptions o;
  o.timeout = timeout;
  strata::MpiParameterServers rt{strata::ClusterSpec::from_counts(1, size), o};
  rt.create_variables({strata::Shape{n}}, strata::Tensor<float>{strata::Shape{n}},
                      [](std::span<float> w, std::span<const float> g, std::size_t, std::uint64_t) {
                        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= g[i];
                      });
  rt.set_step([&](int w, const strata::StepInput&) {
    std::vector<float> p(n), g(n, 1.f);
    rt.pull(w, p);
    rt.push(w, g);
    return strata::StepOutput{0.0, {}, 1};
  });
  std::vector<float> final_value(n, 0.f);
  if (rank == 1) {
    rt.serve(final_value);  // the server takes the end
    CHECK(final_value[n - 1] == -3.f);
  } else if (rank == 2) {
    try {
      rt.serve(final_value);  // resumed after its deadline: it may or may not take the end
    } catch (const strata::CollectiveTimeout&) {
    }
  } else {
    std::vector<strata::RemoteValue<strata::StepOutput>> steps;
    for (int i = 0; i < 3; ++i)
      steps.push_back(rt.schedule(strata::StepInput{strata::Tensor<float>{strata::Shape{1, 1}},
                                                    strata::Tensor<float>{strata::Shape{1}}, i}));
    rt.join();
    std::vector<float> trained(n);
    rt.read(trained);
    REQUIRE(trained[0] == -3.f);
    kill(static_cast<pid_t>(pids[2]), SIGSTOP);
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
      rt.end_training(trained);
    } catch (const strata::CollectiveTimeout& e) {
      what = e.what();
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    kill(static_cast<pid_t>(pids[2]), SIGCONT);
    CAPTURE(what);
    CHECK(what.find("rank 0 (chief) waited 2000 ms for the end of training to reach every rank") != std::string::npos);
    CHECK(what.find("no answer from rank 2 (worker 0)") != std::string::npos);
    CHECK(what.find("rank 1") == std::string::npos);  // the server took it
    CHECK(took < timeout + 3s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace ps_end_stall_test
