// No hangs, ever: failing replicas, replicas that skip a collective, replicas
// that disagree, replicas that never arrive. Each case must end with a typed
// error naming the culprit, quickly, on every replica.
#include <doctest/doctest.h>

#include <atomic>
#include <strata/strata.hpp>
#include <thread>

#include "support/watchdog.hpp"

namespace failure_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

namespace {
template <class E>
std::string cause_of(const strata::ReplicaError& e) {
  try {
    e.rethrow_cause();
  } catch (const E& x) {
    return x.what();
  } catch (...) {
    return "<cause of another type>";
  }
}
strata::CommOptions quick(std::chrono::milliseconds timeout) {
  strata::CommOptions o;
  o.timeout = timeout;
  return o;
}
}  // namespace

TEST_CASE("an exception in one replica reaches the caller and releases the others") {
  strata_test::Watchdog dog("replica exception", 30s);
  for (int p : {2, 4, 16}) {
    strata::MirroredStrategy s{strata::cpu_replicas(p), quick(10min)};  // release must not rely on the timeout
    std::atomic<int> released{0};
    try {
      s.run([&](auto& ctx) {
        if (ctx.replica_id_in_sync_group() == 1) throw std::invalid_argument("bad batch on replica one");
        std::vector<float> g(100, 1.f);
        try {
          ctx.all_reduce(g, strata::Sum);
        } catch (const strata::CollectiveAborted&) {
          released.fetch_add(1);
          throw;
        }
      });
      FAIL("run should have thrown");
    } catch (const strata::ReplicaError& e) {
      CHECK(e.replica() == 1);
      CHECK(std::string(e.what()).find("replica 1 of " + std::to_string(p)) != std::string::npos);
      CHECK(std::string(e.what()).find("bad batch on replica one") != std::string::npos);
      CHECK(cause_of<std::invalid_argument>(e) == "bad batch on replica one");
    }
    CHECK(released == p - 1);
    // The strategy stays usable after a failed run.
    auto ok = s.run([](auto& ctx) {
      std::vector<int> v{1};
      ctx.all_reduce(v, strata::Sum);
      return v[0];
    });
    CHECK(ok[0] == p);
  }
}

TEST_CASE("a replica that returns without calling a collective is named at once") {
  strata_test::Watchdog dog("departed replica", 30s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), quick(10min)};
  try {
    s.run([](auto& ctx) {
      std::vector<double> g(10, 1.0);
      ctx.all_reduce(g, strata::Sum);                  // collective #1: everyone
      if (ctx.replica_id_in_sync_group() == 2) return;  // skips #2
      ctx.all_reduce(g, strata::Sum);
    });
    FAIL("run should have thrown");
  } catch (const strata::ReplicaError& e) {
    const std::string what = cause_of<strata::CollectiveTimeout>(e);
    CHECK((e.replica() == 0 || e.replica() == 1));  // either waiter may be the first to notice
    CHECK(what.find("collective #2 all_reduce(sum, float64, 10 elements") != std::string::npos);
    CHECK(what.find("replica(s) 2 returned from their function without calling it") != std::string::npos);
    CHECK(what.find("replica 2 (completed 1 collectives") != std::string::npos);
  }
}

TEST_CASE("a replica's own error is reported before the collectives it left incomplete") {
  strata_test::Watchdog dog("error priority", 30s);
  strata::MirroredStrategy s{strata::cpu_replicas(4), quick(10min)};
  for (int attempt = 0; attempt < 20; ++attempt) {
    try {
      s.run([](auto& ctx) {
        std::vector<float> g(4);
        if (ctx.replica_id_in_sync_group() == 3) throw std::runtime_error("out of memory on replica three");
        ctx.all_reduce(g, strata::Sum);
      });
      FAIL("run should have thrown");
    } catch (const strata::ReplicaError& e) {
      CHECK(e.replica() == 3);
      CHECK(cause_of<std::runtime_error>(e) == "out of memory on replica three");
    }
  }
}

TEST_CASE("replicas that disagree get CollectiveMismatch naming every replica's call") {
  strata_test::Watchdog dog("mismatch", 30s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), quick(10min)};
  SUBCASE("different element counts") {
    std::atomic<int> raised{0};
    try {
      s.run([&](auto& ctx) {
        std::vector<float> g(ctx.replica_id_in_sync_group() == 1 ? 99 : 100);
        try {
          ctx.all_reduce(g, strata::Sum);
        } catch (const strata::CollectiveMismatch&) {
          raised.fetch_add(1);
          throw;
        }
      });
      FAIL("run should have thrown");
    } catch (const strata::ReplicaError& e) {
      const std::string what = cause_of<strata::CollectiveMismatch>(e);
      CHECK(what.find("element counts differ") != std::string::npos);
      CHECK(what.find("replica 1 called all_reduce(sum, float32, 99 elements") != std::string::npos);
      CHECK(what.find("replica 0 called all_reduce(sum, float32, 100 elements") != std::string::npos);
    }
    CHECK(raised == 3);  // on every replica, not just one
  }
  SUBCASE("different operations and types") {
    CHECK_THROWS_WITH(s.run([](auto& ctx) {
      std::vector<float> f(4);
      std::vector<double> d(4);
      if (ctx.replica_id_in_sync_group() == 0) ctx.all_reduce(d, strata::Sum);
      else if (ctx.replica_id_in_sync_group() == 1) ctx.all_reduce(f, strata::Max);
      else ctx.all_reduce(f, strata::Sum);
    }), doctest::Contains("replicas called different collectives"));
  }
  SUBCASE("one replica calls a collective the others skipped") {
    CHECK_THROWS_WITH(s.run([](auto& ctx) {
      std::vector<float> f(4);
      if (ctx.replica_id_in_sync_group() == 2) ctx.barrier();
      ctx.all_reduce(f, strata::Sum);
    }), doctest::Contains("replica 2 called barrier()"));
  }
  SUBCASE("different algorithms") {
    CHECK_THROWS_WITH(s.run([](auto& ctx) {
      std::vector<float> f(4);
      if (ctx.replica_id_in_sync_group() == 0) ctx.communicator().all_reduce(f, strata::Sum, strata::Ring{});
      else ctx.communicator().all_reduce(f, strata::Sum, strata::Direct{});
    }), doctest::Contains("all_reduce(sum, float32, 4 elements, ring)"));
  }
  SUBCASE("a root that is not a replica, an output of the wrong size") {
    CHECK_THROWS_WITH(s.run([](auto& ctx) {
      std::vector<float> f(4);
      ctx.broadcast(f, 3);
    }), doctest::Contains("root 3 is not a replica (there are 3)"));
    CHECK_THROWS_WITH(s.run([](auto& ctx) {
      std::vector<float> in(10), out(3);  // replica 0's shard of 10 over 3 is 4
      ctx.reduce_scatter(in, out, strata::Sum);
    }), doctest::Contains("replica 0's output holds 3 elements but its shard of 10 has 4"));
    CHECK_THROWS_WITH(s.run([](auto& ctx) {
      std::vector<float> in(10), out(9);
      ctx.all_reduce(in, out, strata::Sum);
    }), doctest::Contains("output holds 9 elements but its input 10"));
  }
}

TEST_CASE("a replica that never arrives makes the collective time out, naming it") {
  strata_test::Watchdog dog("timeout", 30s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), quick(200ms)};
  const auto start = std::chrono::steady_clock::now();
  try {
    s.run([](auto& ctx) {
      std::vector<float> g(8);
      ctx.all_reduce(g, strata::Sum);
      if (ctx.replica_id_in_sync_group() == 1) std::this_thread::sleep_for(1500ms);  // a straggler
      ctx.all_reduce(g, strata::Sum);
    });
    FAIL("run should have thrown");
  } catch (const strata::ReplicaError& e) {
    const std::string what = cause_of<strata::CollectiveTimeout>(e);
    CHECK(e.replica() == 0);
    CHECK(what.find("collective #2 all_reduce(sum, float32, 8 elements") != std::string::npos);
    CHECK(what.find("timed out after 200 ms") != std::string::npos);
    CHECK(what.find("missing: replica 1 (completed 1 collectives, entered 1)") != std::string::npos);
  }
  // run() returns once the straggler reaches its next collective and is released.
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("more replicas than cores: waiting does not burn the cores") {
  strata_test::Watchdog dog("oversubscribed", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(16)};
  // Replica 0 computes for a while; the 15 others wait in a collective. If
  // they spun, replica 0 would crawl; blocked, it runs at full speed.
  const auto cpu0 = std::clock();
  auto res = s.run([](auto& ctx) {
    if (ctx.replica_id_in_sync_group() == 0) std::this_thread::sleep_for(300ms);
    std::vector<int> v{1};
    ctx.all_reduce(v, strata::Sum);
    return v[0];
  });
  const double cpu_seconds = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  CHECK(res[15] == 16);
  // 15 spinning threads for 300 ms would cost 4.5 CPU-seconds.
  CHECK(cpu_seconds < 1.0);
}

TEST_CASE("run from inside a replica is refused instead of deadlocking") {
  strata_test::Watchdog dog("nested run", 30s);
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  CHECK_THROWS_WITH(s.run([&](auto&) { s.run([](auto&) {}); }), doctest::Contains("called from inside one of its own replicas"));
}

}  // namespace failure_test
