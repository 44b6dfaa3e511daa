// Non-blocking collectives of the thread team (ThreadCommunicator's *_async
// forms, strata::Work): bitwise the blocking forms' results, several works in
// flight completed in issue order, blocking and non-blocking calls mixed,
// test() before and after completion, a replica that never arrives named by
// CollectiveTimeout, a failed replica ending pending work with
// CollectiveAborted at once, empty buffers, sizes not divisible by the
// replica count, more replicas than cores, and ReplicaContext forwarding.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <strata/strata.hpp>

#include "support/watchdog.hpp"

namespace async_comm_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

static_assert(strata::AsyncCommunicator<strata::ThreadCommunicator>);

namespace {

strata::CommOptions options(std::chrono::milliseconds timeout) {
  strata::CommOptions o;
  o.timeout = timeout;
  return o;
}

//! Values whose sums depend on the order of addition (so "bitwise equal" means the same order).
template <class T>
std::vector<T> data(int replica, std::size_t n, int salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double x =
        std::sin(0.37 * static_cast<double>(i) + 1.3 * replica + 0.11 * salt) * 1e3 + 1e-3 * static_cast<double>(i);
    if constexpr (std::is_floating_point_v<T>) v[i] = static_cast<T>(x);
    else v[i] = static_cast<T>(std::llround(x));
  }
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

//! Each collective once blocking and once non-blocking on copies of the same
//! inputs; returns whether every pair agrees bitwise.
template <class T, class Algo>
bool async_matches_blocking(strata::ThreadCommunicator& c, std::size_t n) {
  const int r = c.rank(), p = c.size();
  const auto in = data<T>(r, n, 1);
  bool ok = true;
  {  // in-place all-reduce
    auto a = in, b = in;
    c.all_reduce(a, strata::Sum, Algo{});
    strata::Work w = c.all_reduce_async(b, strata::Sum, Algo{});
    w.wait();
    ok = ok && same_bits(a, b);
  }
  {  // out-of-place all-reduce, max
    std::vector<T> a(n), b(n);
    c.all_reduce(in, a, strata::Max, Algo{});
    c.all_reduce_async(in, b, strata::Max, Algo{}).wait();
    ok = ok && same_bits(a, b);
  }
  {  // reduce-scatter
    const auto shard = strata::shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r));
    std::vector<T> a(shard.size()), b(shard.size());
    c.reduce_scatter(in, a, strata::Sum);
    c.reduce_scatter_async(in, b, strata::Sum).wait();
    ok = ok && same_bits(a, b);
  }
  {  // all-gather of unequal inputs (replica r gives n + r elements)
    const auto mine = data<T>(r, n + static_cast<std::size_t>(r), 2);
    std::size_t total = 0;
    for (int q = 0; q < p; ++q) total += n + static_cast<std::size_t>(q);
    std::vector<T> a(total), b(total);
    c.all_gather(mine, a);
    c.all_gather_async(mine, b).wait();
    ok = ok && same_bits(a, b);
  }
  {  // broadcast from the last replica
    auto a = in, b = in;
    c.broadcast(a, p - 1);
    c.broadcast_async(b, p - 1).wait();
    ok = ok && same_bits(a, b);
  }
  return ok;
}

}  // namespace

TEST_CASE_TEMPLATE("async collectives equal the blocking ones bitwise: every size, algorithm and dtype", T, float,
                   double, std::int64_t) {
  strata_test::Watchdog dog("async equals blocking", 120s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), options(60s)};
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{30011}}) {
    INFO("n=" << n);
    auto ok = s.run([&](auto& ctx) {
      auto& c = ctx.communicator();
      return async_matches_blocking<T, strata::Direct>(c, n) && async_matches_blocking<T, strata::Ring>(c, n) &&
             async_matches_blocking<T, strata::AutoReduce>(c, n);
    });
    for (bool b : ok) CHECK(b);
  }
}

TEST_CASE("several works in flight complete in issue order, each with its own result") {
  strata_test::Watchdog dog("works in flight", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), options(60s)};
  constexpr int k = 6;
  auto got = s.run([&](auto& ctx) {
    auto& c = ctx.communicator();
    std::vector<std::vector<double>> bufs, want;
    for (int i = 0; i < k; ++i) bufs.push_back(data<double>(c.rank(), 1000 + static_cast<std::size_t>(i) * 17, i));
    want = bufs;
    for (auto& w : want) c.all_reduce(w, strata::Sum);
    std::vector<strata::Work> works;
    for (auto& b : bufs) works.push_back(c.all_reduce_async(b, strata::Sum));
    works.back().wait();  // the last one ended: so did every one before it
    bool in_order = true;
    for (auto& w : works) in_order = in_order && w.is_completed();
    for (auto& w : works) w.wait();
    bool equal = true;
    for (std::size_t i = 0; i < bufs.size(); ++i) equal = equal && same_bits(bufs[i], want[i]);
    return in_order && equal;
  });
  for (bool b : got) CHECK(b);
}

TEST_CASE("blocking calls issued while works are pending run after them, in issue order (p2p included)") {
  strata_test::Watchdog dog("mixed blocking and async", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(60s)};
  auto got = s.run([&](auto& ctx) {
    auto& c = ctx.communicator();
    const int r = c.rank();
    auto a = data<float>(r, 5000, 1), b = data<float>(r, 300, 2), d = data<float>(r, 77, 3);
    auto a0 = a, b0 = b, d0 = d;
    c.all_reduce(a0, strata::Sum);
    c.all_reduce(b0, strata::Mean);
    c.all_reduce(d0, strata::Min);
    strata::Work wa = c.all_reduce_async(a, strata::Sum);
    c.all_reduce(b, strata::Mean);           // blocking: waits for wa's turn to end first
    const bool a_done_first = wa.is_completed();
    strata::Work wd = c.all_reduce_async(d, strata::Min);
    std::vector<float> msg(10, static_cast<float>(r));
    if (r == 0) c.send(msg, 1, 4);  // queued behind wd on replica 0
    else c.recv(msg, 0, 4);
    c.barrier();
    wa.wait();
    wd.wait();
    return a_done_first && wd.is_completed() && same_bits(a, a0) && same_bits(b, b0) && same_bits(d, d0) &&
           msg == std::vector<float>(10, 0.0f);
  });
  for (bool b : got) CHECK(b);
}

TEST_CASE("test() and is_completed(): false while a peer has not arrived, true after; a default Work is completed") {
  strata_test::Watchdog dog("test()", 60s);
  strata::Work none;
  CHECK(none.is_completed());
  CHECK(none.test());
  none.wait();
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(60s)};
  std::atomic<bool> checked{false};
  auto got = s.run([&](auto& ctx) {
    auto& c = ctx.communicator();
    std::vector<float> v(100, 1.0f + static_cast<float>(c.rank()));
    if (c.rank() == 1) {
      while (!checked.load()) std::this_thread::sleep_for(1ms);  // arrives only after replica 0 looked
      c.all_reduce(v, strata::Sum);
      return true;
    }
    strata::Work w = c.all_reduce_async(v, strata::Sum);
    const bool pending = !w.test() && !w.is_completed();  // replica 1 has not arrived: it cannot be done
    checked.store(true);
    w.wait();
    strata::Work moved = std::move(w);
    return pending && moved.test() && moved.is_completed() && v == std::vector<float>(100, 3.0f);
  });
  for (bool b : got) CHECK(b);
}

TEST_CASE("a Work destroyed unwaited waits: its buffer holds the result afterwards") {
  strata_test::Watchdog dog("unwaited work", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), options(60s)};
  auto got = s.run([&](auto& ctx) {
    auto& c = ctx.communicator();
    std::vector<double> v(100003, 1.0), w(10, 2.0);
    {
      strata::Work a = c.all_reduce_async(v, strata::Sum);
      strata::Work b = c.all_reduce_async(w, strata::Sum);
      b = c.barrier_async();  // assigning over a pending Work waits for it first
    }
    return v == std::vector<double>(100003, 3.0) && w == std::vector<double>(10, 6.0);
  });
  for (bool b : got) CHECK(b);
}

TEST_CASE("empty buffers and one replica: every async collective completes") {
  strata_test::Watchdog dog("empty async", 60s);
  for (int p : {1, 3}) {
    strata::MirroredStrategy s{strata::cpu_replicas(p), options(60s)};
    auto got = s.run([&](auto& ctx) {
      auto& c = ctx.communicator();
      std::vector<float> e, e2;
      std::vector<strata::Work> ws;
      ws.push_back(c.all_reduce_async(e, strata::Sum));
      ws.push_back(c.all_reduce_async(e, e2, strata::Sum));
      ws.push_back(c.reduce_scatter_async(e, e2, strata::Sum));
      ws.push_back(c.all_gather_async(e, e2));
      ws.push_back(c.broadcast_async(e, 0));
      ws.push_back(c.barrier_async());
      for (auto& w : ws) w.wait();
      return true;
    });
    CHECK(got.size() == static_cast<std::size_t>(p));
  }
}

TEST_CASE("a replica that never arrives: wait() throws CollectiveTimeout naming it within the deadline") {
  strata_test::Watchdog dog("async timeout", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), options(300ms)};
  std::atomic<int> gave_up{0};
  std::vector<std::string> errors(3);
  std::vector<double> waited(3, 0.0);
  std::vector<int> queued_failed(3, 0);
  s.run([&](auto& ctx) {
    auto& c = ctx.communicator();
    const int r = c.rank();
    if (r == 2) {  // busy elsewhere until both others gave up
      while (gave_up.load() < 2) std::this_thread::sleep_for(1ms);
      return 0;
    }
    std::vector<float> v(1000, 1.0f), u(10, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    strata::Work w = c.all_reduce_async(v, strata::Sum);
    strata::Work queued = c.all_reduce_async(u, strata::Sum);  // behind it: ends with the abort
    try {
      w.wait();
      errors[static_cast<std::size_t>(r)] = "no error";
    } catch (const strata::CollectiveTimeout& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    } catch (const strata::CollectiveAborted& e) {  // the other replica's timeout came first
      errors[static_cast<std::size_t>(r)] = std::string("aborted: ") + e.what();
    }
    try {
      queued.wait();
    } catch (const strata::CollectiveError&) {
      queued_failed[static_cast<std::size_t>(r)] = 1;
    }
    waited[static_cast<std::size_t>(r)] = seconds_since(t0);
    gave_up.fetch_add(1);
    return 0;
  });
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    INFO(errors[static_cast<std::size_t>(r)]);
    CHECK(contains(errors[static_cast<std::size_t>(r)], "replica 2"));
    timeouts += contains(errors[static_cast<std::size_t>(r)], "timed out after 300 ms") ? 1 : 0;
    CHECK(waited[static_cast<std::size_t>(r)] < 10);  // the 300 ms deadline, not a hang
    CHECK(queued_failed[static_cast<std::size_t>(r)] == 1);
  }
  CHECK(timeouts >= 1);
}

TEST_CASE("a replica that returns without calling: the others' wait() names it") {
  strata_test::Watchdog dog("async departed", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(60s)};
  std::string error;
  s.run([&](auto& ctx) {
    auto& c = ctx.communicator();
    if (c.rank() == 1) return 0;
    std::vector<float> v(10, 1.0f);
    strata::Work w = c.all_reduce_async(v, strata::Sum);
    try {
      w.wait();
    } catch (const strata::CollectiveTimeout& e) {
      error = e.what();
    }
    return 0;
  });
  INFO(error);
  CHECK(contains(error, "replica(s) 1 returned from their function without calling it"));
}

TEST_CASE("a replica that fails: the others' pending works end with CollectiveAborted at once") {
  strata_test::Watchdog dog("async abort", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), options(60s)};
  std::vector<std::string> errors(3);
  std::vector<double> waited(3, 0.0);
  std::vector<int> aborted(3, 0), rethrown(3, 0);
  try {
    s.run([&](auto& ctx) {
      auto& c = ctx.communicator();
      const int r = c.rank();
      if (r == 1) throw std::runtime_error("replica 1 ran out of memory");
      std::vector<float> a(1000, 1.0f), b(100, 1.0f);
      const auto t0 = std::chrono::steady_clock::now();
      strata::Work wa = c.all_reduce_async(a, strata::Sum);
      strata::Work wb = c.reduce_scatter_async(a, b, strata::Sum);  // queued behind wa
      const auto ur = static_cast<std::size_t>(r);
      for (strata::Work* w : {&wa, &wb}) {
        try {
          w->wait();
        } catch (const strata::CollectiveAborted& e) {
          ++aborted[ur];
          errors[ur] = e.what();
        }
        try {
          w->test();  // test() rethrows a failure too
        } catch (const strata::CollectiveAborted&) {
          ++rethrown[ur];
        }
      }
      waited[ur] = seconds_since(t0);
      return 0;
    });
    FAIL("the failing replica must be reported");
  } catch (const strata::ReplicaError& e) {
    CHECK(e.replica() == 1);
  }
  for (int r : {0, 2}) {
    INFO(errors[static_cast<std::size_t>(r)]);
    CHECK(contains(errors[static_cast<std::size_t>(r)], "replica 1 failed: replica 1 ran out of memory"));
    CHECK(waited[static_cast<std::size_t>(r)] < 10);  // not the 60 s timeout
    CHECK(aborted[static_cast<std::size_t>(r)] == 2);
    CHECK(rethrown[static_cast<std::size_t>(r)] == 2);
  }
}

TEST_CASE("replicas that disagree: every wait() throws CollectiveMismatch") {
  strata_test::Watchdog dog("async mismatch", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(60s)};
  auto got = s.run([&](auto& ctx) {
    auto& c = ctx.communicator();
    std::vector<float> v(10 + static_cast<std::size_t>(c.rank()), 1.0f);
    strata::Work w = c.all_reduce_async(v, strata::Sum);
    try {
      w.wait();
    } catch (const strata::CollectiveMismatch& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  for (const auto& e : got) {
    INFO(e);
    CHECK(contains(e, "element counts differ"));
  }
}

TEST_CASE("more replicas than cores: async all-reduces and reduce-scatters equal the blocking ones") {
  strata_test::Watchdog dog("async oversubscribed", 120s);
  const int p = static_cast<int>(std::max(2u, std::thread::hardware_concurrency())) * 2 + 1;
  strata::MirroredStrategy s{strata::cpu_replicas(p), options(60s)};
  auto ok = s.run([&](auto& ctx) {
    auto& c = ctx.communicator();
    return async_matches_blocking<float, strata::Ring>(c, 10007) &&
           async_matches_blocking<float, strata::Direct>(c, 13);
  });
  for (bool b : ok) CHECK(b);
}

TEST_CASE("ReplicaContext forwards the async forms with its algorithm") {
  strata_test::Watchdog dog("context async", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), options(60s)};
  auto got = s.run([&](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    auto g = data<float>(r, 4099, 5), want = g;
    ctx.all_reduce(want, strata::Mean);
    strata::Work w = ctx.all_reduce_async(g, strata::Mean);
    std::vector<float> shard(strata::shard_range(4099, 3, static_cast<std::size_t>(r)).size());
    strata::Work ws = ctx.reduce_scatter_async(want, shard, strata::Sum);
    strata::Work wb = ctx.broadcast_async(want, 0);
    strata::Work wbar = ctx.barrier_async();
    w.wait();
    ws.wait();
    wb.wait();
    wbar.wait();
    std::vector<float> gathered(4099);
    ctx.all_gather_async(shard, gathered).wait();
    return same_bits(g, want);
  });
  for (bool b : got) CHECK(b);
}

TEST_CASE("FollowedWork: the rest runs once, after the operation, on the waiting thread; not when dropped") {
  using strata::detail::FollowedWork;
  using strata::detail::WorkState;
  auto started = [] { return std::make_shared<WorkState>("op", std::chrono::seconds(5), nullptr); };
  SUBCASE("test() is false until the operation ended, then runs the rest once") {
    auto st = started();
    int runs = 0;
    strata::Work w(std::make_unique<FollowedWork>(strata::Work(st), [&] { ++runs; }));
    CHECK_FALSE(w.test());
    CHECK_FALSE(w.is_completed());
    CHECK(runs == 0);
    st->finish(nullptr);
    CHECK(w.test());
    CHECK(w.is_completed());
    w.wait();
    CHECK(runs == 1);
  }
  SUBCASE("wait() from another thread's completion; the rest's error is the outcome, repeated") {
    auto st = started();
    std::thread done([st] {
      std::this_thread::sleep_for(20ms);
      st->finish(nullptr);
    });
    strata::Work w(std::make_unique<FollowedWork>(strata::Work(st), [] { throw strata::Error("upload failed"); }));
    CHECK_THROWS_WITH_AS(w.wait(), "upload failed", strata::Error);
    CHECK_THROWS_WITH_AS(w.test(), "upload failed", strata::Error);
    done.join();
  }
  SUBCASE("the operation's error: thrown, and the rest never runs") {
    auto st = started();
    int runs = 0;
    strata::Work w(std::make_unique<FollowedWork>(strata::Work(st), [&] { ++runs; }));
    st->finish(std::make_exception_ptr(strata::CollectiveAborted("peer 1 failed")));
    CHECK_THROWS_AS(w.wait(), strata::CollectiveAborted);
    CHECK_THROWS_AS(w.wait(), strata::CollectiveAborted);
    CHECK(runs == 0);
  }
  SUBCASE("dropped unwaited: the operation settles, the rest does not run") {
    auto st = started();
    int runs = 0;
    std::thread done([st] {
      std::this_thread::sleep_for(20ms);
      st->finish(nullptr);
    });
    {
      strata::Work w(std::make_unique<FollowedWork>(strata::Work(st), [&] { ++runs; }));
    }
    {
      std::lock_guard lk(st->mu);
      CHECK(st->done);  // the handle waited for it before going
    }
    CHECK(runs == 0);
    done.join();
  }
}

}  // namespace async_comm_test
