// A rank that stops responding (SIGSTOP) in the middle of a collective or
// of setting up a communicator: the other rank raises CollectiveTimeout
// naming it within the timeout, instead of hanging in MPI, then resumes it
// (SIGCONT) so that the job ends. 2 ranks, shared memory and TCP. Rank 1
// stops itself: after a collective's contract has agreed (the test seam
// detail::mpi::after_contract_hook), so that rank 0 waits in the data phase
// (MPI_Iallreduce, MPI_Ibcast, ...), or before creating a communicator.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <strata/comm/mpi/communicator.hpp>

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

namespace stall_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

namespace {

constexpr auto timeout = 2s;

strata::MpiCommunicator make() {
  strata::MpiOptions o;
  o.timeout = timeout;
  return strata::MpiCommunicator::world(o);
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

//! A buffer that outlives the test: a collective given up at its deadline
//! may still be completed by MPI later, writing into it.
template <class T>
std::vector<T>& buffer(std::size_t n) {
  return *new std::vector<T>(n, T{1});
}

//! Rank 1's pid, known on rank 0 (exchanged while both run).
pid_t peer_pid() {
  int pids[2] = {0, 0};
  const int mine = static_cast<int>(getpid());
  MPI_Allgather(&mine, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
  return static_cast<pid_t>(pids[1]);
}

//! Runs `call` on both ranks; rank 1 stops itself `where` ("data": after the
//! contract, "before": before the call). Rank 0 must raise CollectiveTimeout
//! within the timeout plus a bounded grace, naming rank 1 and `expect`; it
//! then resumes rank 1, whose own call then ends (by its deadline, or done).
void stopped_peer(const char* where, const std::string& expect, const std::function<void()>& call) {
  const pid_t peer = peer_pid();
  if (world_rank() == 1) {
    const bool data = std::string(where) == "data";
    if (data) strata::detail::mpi::after_contract_hook = [](std::uint64_t) { std::raise(SIGSTOP); };
    else std::raise(SIGSTOP);
    try {
      call();
    } catch (const strata::CollectiveError&) {  // its deadline passed while it was stopped
    }
    strata::detail::mpi::after_contract_hook = nullptr;
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
      call();
    } catch (const strata::CollectiveTimeout& e) {
      what = e.what();
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    kill(peer, SIGCONT);
    CAPTURE(what);
    CHECK(what.find(expect) != std::string::npos);
    CHECK(took >= timeout);
    CHECK(took < timeout + 3s);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // both running again: the next case starts together
}

}  // namespace

TEST_CASE("a peer stopped in MPI_Iallreduce (native, named and chosen by AutoReduce) is named within the timeout") {
  REQUIRE(world_rank() < 2);
  {
    auto c = make();
    stopped_peer("data", "rank(s) 1 did not complete MPI_Iallreduce",
                 [&] { c.all_reduce(buffer<float>(1000), strata::Sum, strata::Native{}); });
    if (world_rank() == 0) CHECK(!c.poisoned().empty());  // unusable after the timeout, saying why
  }
  {
    // AutoReduce's first call of a size class above the contract's message measures native first
    auto c = make();
    std::vector<float>& v = buffer<float>(1 << 14);
    REQUIRE(c.choose(v.size() * sizeof(float)) == strata::Native::name);
    stopped_peer("data", "rank(s) 1 did not complete MPI_Iallreduce", [&] { c.all_reduce(v, strata::Sum); });
  }
}

TEST_CASE("a peer stopped in broadcast, reduce_scatter or all_gather is named within the timeout") {
  std::vector<double>& v = buffer<double>(4096);
  std::vector<double>& out = buffer<double>(2048);
  {
    auto c = make();
    // from the stopped rank: a root may finish without its receivers, a receiver needs the root
    stopped_peer("data", "rank(s) 1 did not complete MPI_Ibcast (root rank 1)", [&] { c.broadcast(v, 1); });
  }
  {
    auto c = make();
    stopped_peer("data", "rank(s) 1 did not complete MPI_Ireduce_scatter",
                 [&] { c.reduce_scatter(v, out, strata::Sum); });
  }
  {
    auto c = make();
    std::vector<double>& all = buffer<double>(2 * v.size());
    stopped_peer("data", "rank(s) 1 did not complete MPI_Iallgatherv", [&] { c.all_gather(v, all); });
  }
}

TEST_CASE("setting up: a peer stopped before split or before creating a communicator is named, not waited for") {
  {
    // split agrees on (color, key) under the deadline before the blocking MPI_Comm_split
    auto c = make();
    stopped_peer("data", "rank(s) 1 did not complete MPI_Iallgatherv", [&] { (void)c.split(0, world_rank()); });
  }
  // the communicator's duplicate is made by MPI_Comm_idup under the deadline; its timeout is a failure seen:
  // the communicators live then are never freed (a peer that did not take part may still send on them)
  auto live = make();
  REQUIRE_FALSE(live.never_freed());
  stopped_peer("before", "creating an MPI communicator timed out after 2000 ms on rank 0 of 2: not every rank "
                         "created it; some of rank(s) 1 did not take part", [&] { (void)make(); });
  // (rank 1's own creation may complete: it meets rank 0's pending one, which MPI can neither cancel nor free)
  if (world_rank() == 0) CHECK(live.never_freed());
  // after all this, fresh communicators work
  auto c = make();
  std::vector<int> one{1};
  c.all_reduce(one, strata::Sum);
  CHECK(one[0] == 2);
}

}  // namespace stall_test
