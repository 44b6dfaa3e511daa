// Non-blocking collectives of MpiCommunicator (2 ranks): bitwise the blocking
// forms' results, works in flight completed in issue order, blocking calls
// and point-to-point messages issued while works are pending, test() before
// and after a peer arrives, a peer that stalls named by CollectiveTimeout, an
// abort notice ending pending work with CollectiveAborted; a blocking call on
// another communicator running while a pending collective waits for it. Rank 1
// waits for rank 0 through a file where the one communicator cannot be used
// (its calls run in issue order, behind the pending work).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/mpi/communicator.hpp>

#include <unistd.h>

namespace async_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

static_assert(strata::AsyncCommunicator<strata::MpiCommunicator>);

namespace {

strata::MpiCommunicator make(std::chrono::milliseconds timeout = 60s) {
  strata::MpiOptions o;
  o.timeout = timeout;
  return strata::MpiCommunicator::world(o);
}

template <class T>
std::vector<T> data(int rank, std::size_t n, int salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double x =
        std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + 0.11 * salt) * 1e3 + 1e-3 * static_cast<double>(i);
    if constexpr (std::is_floating_point_v<T>) v[i] = static_cast<T>(x);
    else v[i] = static_cast<T>(std::llround(x));
  }
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

//! A flag between the two ranks of this host, outside MPI: rank 0 raises it,
//! rank 1 waits for it (bounded) and removes it. Named after rank 0's pid,
//! learnt over MPI while nothing is pending.
class Flag {
 public:
  Flag(strata::MpiCommunicator& c, const char* name) {
    std::int64_t pid[1] = {c.rank() == 0 ? static_cast<std::int64_t>(getpid()) : 0};
    c.broadcast(pid, 0);
    path_ = "/tmp/strata_async_test_" + std::to_string(pid[0]) + "_" + name;
  }
  void raise() const {
    if (std::FILE* f = std::fopen(path_.c_str(), "w")) std::fclose(f);
  }
  [[nodiscard]] bool wait(std::chrono::seconds limit = 60s) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (access(path_.c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(2ms);
    }
    std::remove(path_.c_str());
    return true;
  }

 private:
  std::string path_;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE_TEMPLATE("async collectives equal the blocking ones bitwise", T, float, double, std::int64_t) {
  auto c = make();
  const int r = c.rank(), p = c.size();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{30011}}) {
    INFO("n=" << n);
    const auto in = data<T>(r, n, 1);
    {
      auto a = in, b = in, c2 = in, d = in;
      c.all_reduce(a, strata::Sum, strata::Ring{});
      strata::Work w = c.all_reduce_async(b, strata::Sum, strata::Ring{});
      c.all_reduce(c2, strata::Sum, strata::Direct{});
      strata::Work wd = c.all_reduce_async(d, strata::Sum, strata::Direct{});
      w.wait();
      wd.wait();
      CHECK(same_bits(a, b));
      CHECK(same_bits(c2, d));
    }
    {
      std::vector<T> a(n), b(n);
      c.all_reduce(in, a, strata::Max);
      c.all_reduce_async(in, b, strata::Max).wait();
      CHECK(same_bits(a, b));
    }
    {
      const auto shard = strata::shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r));
      std::vector<T> a(shard.size()), b(shard.size());
      c.reduce_scatter(in, a, strata::Sum);
      c.reduce_scatter_async(in, b, strata::Sum).wait();
      CHECK(same_bits(a, b));
    }
    {
      const auto mine = data<T>(r, n + static_cast<std::size_t>(r), 2);
      std::vector<T> a(2 * n + 1), b(2 * n + 1);
      c.all_gather(mine, a);
      c.all_gather_async(mine, b).wait();
      CHECK(same_bits(a, b));
    }
    {
      auto a = in, b = in;
      c.broadcast(a, 1);
      c.broadcast_async(b, 1).wait();
      CHECK(same_bits(a, b));
    }
  }
}

TEST_CASE("works in flight complete in issue order; blocking calls and messages issued meanwhile run after them") {
  auto c = make();
  const int r = c.rank();
  constexpr int k = 5;
  std::vector<std::vector<double>> bufs, want;
  for (int i = 0; i < k; ++i) bufs.push_back(data<double>(r, 500 + static_cast<std::size_t>(i) * 1001, i));
  want = bufs;
  for (auto& w : want) c.all_reduce(w, strata::Sum, strata::Ring{});
  std::vector<strata::Work> works;
  for (auto& b : bufs) works.push_back(c.all_reduce_async(b, strata::Sum, strata::Ring{}));
  std::vector<float> msg(3000, static_cast<float>(r + 1));  // over 4 KiB: the send waits for the recv
  if (r == 0) c.send(msg, 1, 9);  // queued behind the works
  else c.recv(msg, 0, 9);
  CHECK(works.back().is_completed());  // the message went after every work
  c.barrier_async().wait();
  for (auto& w : works) w.wait();
  for (int i = 0; i < k; ++i) CHECK(same_bits(bufs[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)]));
  CHECK(msg == std::vector<float>(3000, 1.0f));
  CHECK(c.completed() == static_cast<std::uint64_t>(2 * k + 1));  // k blocking, k async, the barrier
}

// Two communicators: rank 0's blocking call on b runs while its collective on a waits on the progress
// thread for rank 1, which joins it only after b's. The wait hands the MPI lock over between its looks
// (SerialMpi::let_others_in); held throughout, both ranks would wait for the timeout.
TEST_CASE("a blocking call on one communicator runs while another's pending collective waits for it") {
  auto world = make(5s);
  const int r = world.rank();
  auto a = world.split(0, r), b = world.split(0, r);
  std::vector<float> x(1000, 1.0f + static_cast<float>(r)), y(1000, 10.0f * static_cast<float>(r + 1));
  const auto t0 = std::chrono::steady_clock::now();
  if (r == 0) {
    strata::Work w = a.all_reduce_async(x, strata::Sum);  // rank 1 arrives only after b's all-reduce
    b.all_reduce(y, strata::Sum);
    w.wait();
  } else {
    b.all_reduce(y, strata::Sum);
    a.all_reduce(x, strata::Sum);
  }
  CHECK(x == std::vector<float>(1000, 3.0f));
  CHECK(y == std::vector<float>(1000, 30.0f));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);  // not the 5 s timeout
}

TEST_CASE("test(): false while the peer has not arrived, true after") {
  auto c = make();
  Flag looked(c, "looked");
  std::vector<float> v(100, 1.0f + static_cast<float>(c.rank()));
  if (c.rank() == 1) {
    REQUIRE(looked.wait());  // arrive only after rank 0 looked
    c.all_reduce(v, strata::Sum);
  } else {
    strata::Work w = c.all_reduce_async(v, strata::Sum);
    const bool pending = !w.test() && !w.is_completed();
    looked.raise();
    w.wait();
    CHECK(pending);
    CHECK(w.test());
  }
  CHECK(v == std::vector<float>(100, 3.0f));
}

TEST_CASE("a peer that stalls: wait() throws CollectiveTimeout naming it; the work queued behind fails at once") {
  auto c = make(500ms);
  Flag gave_up(c, "gave_up");
  if (c.rank() == 1) {
    REQUIRE(gave_up.wait());  // never calls the collective: stalled until rank 0 gave up
    return;
  }
  std::vector<float> v(1000, 1.0f), u(10, 1.0f);
  strata::Work w = c.all_reduce_async(v, strata::Sum, strata::Ring{});
  strata::Work queued = c.all_reduce_async(u, strata::Sum);
  std::string what;
  try {
    w.wait();
  } catch (const strata::CollectiveTimeout& e) {
    what = e.what();
  }
  CHECK_THROWS_AS(queued.wait(), strata::CollectiveAborted);  // the communicator is unusable now
  gave_up.raise();
  INFO(what);
  CHECK(contains(what, "timed out after 500 ms"));
  CHECK(contains(what, "rank(s) 1 never arrived"));
}

TEST_CASE("an abort notice from the peer ends pending work with CollectiveAborted carrying its reason") {
  auto c = make();
  Flag issued(c, "issued");
  if (c.rank() == 1) {
    REQUIRE(issued.wait());
    c.abort("rank 1 ran out of memory");
    return;
  }
  std::vector<float> v(1000, 1.0f);
  strata::Work w = c.all_reduce_async(v, strata::Sum);
  strata::Work queued = c.broadcast_async(v, 0);
  issued.raise();
  std::string what;
  try {
    w.wait();
  } catch (const strata::CollectiveAborted& e) {
    what = e.what();
  }
  CHECK_THROWS_AS(queued.wait(), strata::CollectiveAborted);
  INFO(what);
  CHECK(contains(what, "rank 1 failed: rank 1 ran out of memory"));
}

}  // namespace async_test
