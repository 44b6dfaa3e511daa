// Point-to-point send/recv on the MPI communicator under mpirun (2 ranks,
// shared memory and TCP): every dtype at the size edges (empty, one element,
// fused with its header, far past the 4 KiB header message), tags matched
// and ordered, mismatches and timeouts named on the receiver, abort and
// interrupt ending a wait, and the communicator usable afterwards where the
// contract allows it. Ranks 0 and 1 talk; any others only join the collectives.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/communicator.hpp>
#include <strata/comm/mpi/communicator.hpp>

namespace p2p_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

static_assert(strata::Communicator<strata::MpiCommunicator>);

using namespace std::chrono_literals;

namespace {

strata::MpiCommunicator make(std::chrono::milliseconds timeout = 20s) {
  strata::MpiOptions o;
  o.timeout = timeout;
  return strata::MpiCommunicator::world(o);
}

template <class T>
T value(int from, std::size_t i) {
  return static_cast<T>(static_cast<std::int64_t>(i % 1009) * 3 + from * 100000 + 1);
}

// Every rank: all ranks still agree on a collective (the communicator is usable).
void collective_still_works(strata::MpiCommunicator& c) {
  std::vector<int> v(3, 1);
  c.all_reduce(v, strata::Sum);
  CHECK(v[2] == c.size());
  CHECK(c.poisoned().empty());
}

}  // namespace

TEST_CASE_TEMPLATE("send/recv: every dtype, empty to far beyond the fused header, both directions", T, float, double,
                   std::int32_t, std::int64_t) {
  auto c = make();
  REQUIRE(c.size() >= 2);
  const int me = c.rank();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{300001}}) {
    CAPTURE(n);
    if (me > 1) continue;
    const int peer = 1 - me;
    std::vector<T> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = value<T>(me, i);
    std::vector<T> in(n, T{-7});
    if (me == 0) {  // 0 -> 1, then 1 -> 0; a const view is a valid source
      c.send(std::span<const T>(out), peer, 5);
      c.recv(in, peer, 6);
    } else {
      c.recv(in, peer, 5);
      c.send(out, peer, 6);
    }
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += in[i] != value<T>(peer, i);
    CHECK(wrong == 0);
  }
  collective_still_works(c);
}

TEST_CASE("send/recv: several tags in flight are matched by tag, and in order within a tag") {
  auto c = make();
  const int me = c.rank();
  if (me == 0) {
    c.send(std::vector<int>{1, 1}, 1, 3);  // small: each leaves at once, before rank 1 receives
    c.send(std::vector<int>{2}, 1, 5);
    c.send(std::vector<int>{3, 3, 3}, 1, 3);
    c.send(std::vector<double>(4, 4.0), 1, 4);
    c.send(std::vector<float>(100000, 6.f), 1, 6);  // large: waits for rank 1's recv of tag 6
  } else if (me == 1) {
    std::vector<float> big(100000);
    c.recv(big, 0, 6);  // the last one sent, taken first
    CHECK(big.front() == 6.f);
    CHECK(big.back() == 6.f);
    std::vector<int> b(1), a(2), cc(3);
    std::vector<double> d(4);
    c.recv(b, 0, 5);
    c.recv(d, 0, 4);
    c.recv(a, 0, 3);  // tag 3 in the order sent: {1, 1} first, then {3, 3, 3}
    c.recv(cc, 0, 3);
    CHECK(b == std::vector<int>{2});
    CHECK(d == std::vector<double>(4, 4.0));
    CHECK(a == std::vector<int>{1, 1});
    CHECK(cc == std::vector<int>{3, 3, 3});
  }
  collective_still_works(c);
}

TEST_CASE("send/recv: a size or dtype mismatch is named on the receiver, and the next message still arrives") {
  auto c = make();
  const int me = c.rank();
  struct Case {
    std::size_t sent, expected;
    bool as_double;
    const char* says;
  };
  // fused with the header, separate (past 4 KiB), and a dtype that differs
  for (const Case k : {Case{10, 11, false, "sent 10 float32 but this recv expects 11 float32"},
                       Case{5000, 4000, false, "sent 5000 float32 but this recv expects 4000 float32"},
                       Case{8, 8, true, "sent 8 float32 but this recv expects 8 float64"}}) {
    CAPTURE(k.says);
    if (me == 0) {
      c.send(std::vector<float>(k.sent, 1.f), 1, 2);
      c.send(std::vector<float>(3, 9.f), 1, 2);  // the same tag right after the mismatched one
    } else if (me == 1) {
      try {
        if (k.as_double) {
          std::vector<double> v(k.expected);
          c.recv(v, 0, 2);
        } else {
          std::vector<float> v(k.expected);
          c.recv(v, 0, 2);
        }
        FAIL_CHECK("no mismatch raised");
      } catch (const strata::CollectiveMismatch& e) {
        const std::string msg = e.what();
        CHECK(msg.find("recv(from rank 0, tag 2) on rank 1") != std::string::npos);
        CHECK(msg.find(k.says) != std::string::npos);
      }
      std::vector<float> next(3);
      c.recv(next, 0, 2);
      CHECK(next == std::vector<float>(3, 9.f));
    }
    collective_still_works(c);
  }
}

TEST_CASE("send/recv: a recv whose peer never sends times out naming the peer and tag; the communicator stays usable") {
  auto c = make(400ms);
  if (c.rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> v(16);
    try {
      c.recv(v, 1, 9);
      FAIL_CHECK("no timeout");
    } catch (const strata::CollectiveTimeout& e) {
      const std::string msg = e.what();
      CHECK(msg.find("recv(from rank 1, tag 9, 16 float32) on rank 0") != std::string::npos);
      CHECK(msg.find("timed out after 400 ms") != std::string::npos);
      CHECK(msg.find("rank 1 sent no message with tag 9") != std::string::npos);
    }
    const auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(waited >= 400ms);
    CHECK(waited < 5s);
    // usable, yet the job is no longer sure to end together: the exit must not wait for rank 1 without a
    // deadline (issue 21: a pipeline's survivor hung in MPI_Finalize after such a timeout)
    CHECK(strata::detail::mpi::runtime().failed());
  }
  MPI_Barrier(MPI_COMM_WORLD);  // outside the communicator: rank 1 must not time out waiting for rank 0
  collective_still_works(c);
  // a send that is never taken times out too, and leaves the communicator unusable
  if (c.rank() == 0) {
    std::vector<float> big(100000, 1.f);  // past the eager limits: it waits for a recv that never comes
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(c.send(big, 1, 11), doctest::Contains("rank 1 did not take the message"),
                         strata::CollectiveTimeout);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    CHECK(!c.poisoned().empty());
    CHECK_THROWS_WITH_AS(c.send(std::vector<float>(1), 1, 12), doctest::Contains("unusable"),
                         strata::CollectiveAborted);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("send/recv: an abort notice or the interrupt flag ends a wait at once") {
  {
    auto c = make(20s);
    if (c.rank() == 1) {
      c.abort("stage 1 failed: boom");
    } else if (c.rank() == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<float> v(4);
      CHECK_THROWS_WITH_AS(c.recv(v, 1, 0), doctest::Contains("rank 1 failed: stage 1 failed: boom"),
                           strata::CollectiveAborted);
      CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // the notice, not the timeout
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  auto c = make(20s);
  std::atomic<bool> stop{true};
  if (c.rank() == 0) {
    c.set_interrupt(&stop);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> v(4);
    CHECK_THROWS_WITH_AS(c.recv(v, 1, 0), doctest::Contains("a local replica failed"), strata::CollectiveAborted);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("send_async: two ranks send large messages to each other before receiving; order kept with send") {
  auto c = make(5s);
  if (c.rank() < 2) {
    const int peer = 1 - c.rank();
    // past the 4 KiB header message: a blocking send would wait for the other's recv, which waits too
    std::vector<float> mine(50000), got(50000);
    for (std::size_t k = 0; k < 3; ++k) {
      for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = value<float>(c.rank(), i + k);
      c.send_async(mine, peer, 3);  // a copy leaves: `mine` is rewritten at once
      std::fill(mine.begin(), mine.end(), -1.f);
    }
    c.send(std::vector<double>{1.5, 2.5}, peer, 3);  // a blocking send after them, same tag: arrives last
    for (std::size_t k = 0; k < 3; ++k) {
      c.recv(got, peer, 3);
      bool same = true;
      for (std::size_t i = 0; i < got.size() && same; ++i) same = got[i] == value<float>(peer, i + k);
      CHECK(same);
    }
    std::vector<double> last(2);
    c.recv(last, peer, 3);
    CHECK(last[1] == 2.5);
    c.finish_sends();
  }
  collective_still_works(c);
  // a message nobody takes: finish_sends names the peer within the timeout
  auto t = make(400ms);
  if (t.rank() == 0) {
    t.send_async(std::vector<float>(100000, 1.f), 1, 13);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(t.finish_sends(), doctest::Contains("rank 1 did not take the message"),
                         strata::CollectiveTimeout);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("send/recv: invalid peers and tags are errors before anything moves") {
  auto c = make();
  std::vector<float> v(2);
  CHECK_THROWS_WITH_AS(c.send(v, c.rank(), 0), doctest::Contains("cannot send to or receive from itself"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(c.recv(v, -1, 0), doctest::Contains("not a rank"), strata::Error);
  CHECK_THROWS_WITH_AS(c.send(v, c.size(), 0), doctest::Contains("not a rank"), strata::Error);
  CHECK_THROWS_WITH_AS(c.recv(v, (c.rank() + 1) % c.size(), -3), doctest::Contains("tags must be 0 or more"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(c.send(v, (c.rank() + 1) % c.size(), 1 << 30), doctest::Contains("tags must be at most"),
                       strata::Error);
  collective_still_works(c);
}

}  // namespace p2p_test
