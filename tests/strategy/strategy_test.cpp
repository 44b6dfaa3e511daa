// Strategies: composition, run / reduce / gather, scopes, the default and
// one-device strategies.
#include <doctest/doctest.h>

#include <atomic>
#include <numeric>
#include <set>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>
#include <thread>

#include "strategy/strategy_sweep.hpp"
#include "support/watchdog.hpp"

namespace strategy_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

TEST_CASE("run returns one value per replica, each replica knows its id, under every strategy") {
  strata_test::Watchdog dog("run", 30s);
  strata::StrategyChoice five = strata_test::small_choice(5);
  five.stages = 5;  // pipeline: a replica per stage
  strata_test::for_each_strategy({}, [](auto& s, const strata::StrategyInfo& info) {
    const int n = s.num_replicas_in_sync();
    if (info.takes_replicas || info.takes_pipeline_options) CHECK(n == 5);
    auto ids = s.run([n](auto& ctx) {
      CHECK_EQ(ctx.num_replicas_in_sync(), n);  // doctest assertions are thread-safe for checks from multiple threads
      return ctx.replica_id_in_sync_group();
    });
    REQUIRE(ids.size() == static_cast<std::size_t>(n));
    std::vector<int> expected(static_cast<std::size_t>(n));
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(ids.values() == expected);
    CHECK(s.local_results(ids) == expected);
  }, five);
}

TEST_CASE("replicas are persistent threads, distinct from the caller") {
  strata::MirroredStrategy s{strata::cpu_replicas(3)};
  auto a = s.run([](auto&) { return std::this_thread::get_id(); });
  auto b = s.run([](auto&) { return std::this_thread::get_id(); });
  std::set<std::thread::id> ids(a.begin(), a.end());
  CHECK(ids.size() == 3);
  CHECK(ids.count(std::this_thread::get_id()) == 0);
  CHECK(a.values() == b.values());
}

TEST_CASE("run with a void function, many times, under every strategy") {
  strata_test::for_each_strategy({}, [](auto& s, const strata::StrategyInfo&) {
    std::atomic<int> calls{0};
    for (int i = 0; i < 100; ++i) s.run([&](auto&) { calls.fetch_add(1); });
    CHECK(calls == 100 * s.num_replicas_in_sync());
  });
}

TEST_CASE("reduce: SUM and MEAN of scalars and tensors, in replica order") {
  strata::MirroredStrategy s{strata::cpu_replicas(4)};
  auto v = s.run([](auto& ctx) { return static_cast<float>(ctx.replica_id_in_sync_group() + 1); });
  CHECK(s.reduce(strata::Sum, v) == 10.f);
  CHECK(s.reduce(strata::Mean, v) == 2.5f);
  CHECK(s.reduce(strata::Max, v) == 4.f);
  auto ints = s.run([](auto& ctx) { return std::int64_t{ctx.replica_id_in_sync_group()}; });
  CHECK(s.reduce(strata::Sum, ints) == 6);

  auto t = s.run([](auto& ctx) { return strata::Tensor<double>{{2}, static_cast<double>(ctx.replica_id_in_sync_group())}; });
  CHECK(s.reduce(strata::Sum, t) == strata::Tensor<double>({2}, 6.0));
  CHECK(s.reduce(strata::Mean, t) == strata::Tensor<double>({2}, 1.5));

  auto bad = s.run([](auto& ctx) { return strata::Tensor<double>{{static_cast<std::size_t>(1 + ctx.replica_id_in_sync_group() % 2)}}; });
  CHECK_THROWS_WITH(s.reduce(strata::Sum, bad), doctest::Contains("replica 1 returned shape [2] but replica 0 returned [1]"));
}

TEST_CASE("gather: scalars into a vector, tensors along axis 0 with a short last batch") {
  strata::MirroredStrategy s{strata::cpu_replicas(3)};
  auto v = s.run([](auto& ctx) { return ctx.replica_id_in_sync_group() * 10; });
  CHECK(s.gather(v) == strata::Tensor<int>({3}, {0, 10, 20}));
  auto t = s.run([](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    return strata::Tensor<float>{{r == 2 ? 1u : 2u, 2}, static_cast<float>(r)};
  });
  CHECK(s.gather(t) == strata::Tensor<float>({5, 2}, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2}));
  auto bad = s.run([](auto& ctx) { return strata::Tensor<float>{{1, static_cast<std::size_t>(ctx.replica_id_in_sync_group() + 1)}}; });
  CHECK_THROWS_WITH(s.gather(bad), doctest::Contains("replica 1 returned shape [1, 2]"));
  CHECK_THROWS_AS(s.reduce(strata::Sum, strata::PerReplica<float>({1.f})), strata::ShapeError);
}

TEST_CASE("one-device and default strategies") {
  strata::OneDeviceStrategy one{strata::cpu(0)};
  CHECK(one.num_replicas_in_sync() == 1);
  auto r = one.run([](auto& ctx) {
    std::vector<float> g{1.f, 2.f};
    ctx.all_reduce(g, strata::Mean);  // one replica: the identity
    return g;
  });
  CHECK(r[0] == std::vector<float>{1.f, 2.f});
  CHECK_THROWS_WITH(strata::OneDeviceStrategy(strata::cpu_replicas(2)), doctest::Contains("exactly one device, got 2"));

  auto& d = strata::get_strategy();
  CHECK(&d == &strata::get_strategy());
  auto tid = d.run([](auto&) { return std::this_thread::get_id(); });
  CHECK(tid[0] == std::this_thread::get_id());  // the default runs on the caller
}

TEST_CASE("central storage strategy composes ReduceToOne") {
  strata::CentralStorageStrategy s{strata::cpu_replicas(2)};
  static_assert(std::same_as<decltype(s)::reduce_policy, strata::ReduceToOne>);
  auto v = s.run([](auto& ctx) {
    std::vector<float> g{1.f * static_cast<float>(ctx.replica_id_in_sync_group())};
    ctx.all_reduce(g, strata::Sum);
    return g[0];
  });
  CHECK(v[1] == 1.f);
}

TEST_CASE("scope makes the strategy current on this thread, and nests") {
  CHECK_FALSE(strata::current_scope().has_value());
  strata::MirroredStrategy m{strata::cpu_replicas(2)};
  strata::CentralStorageStrategy c{strata::cpu_replicas(3)};
  int n = m.scope([&] {
    CHECK(strata::current_scope()->placement == "mirrored");
    c.scope([] {
      CHECK(strata::current_scope()->num_replicas == 3);
      CHECK(strata::current_scope()->placement == "central_storage");
    });
    CHECK(strata::current_scope()->strategy == &m.any());
    CHECK(&strata::current_strategy() == &m.any());
    CHECK(strata::current_strategy().placement() == strata::PlacementKind::Mirrored);
    return strata::current_scope()->num_replicas;
  });
  CHECK(n == 2);
  CHECK(&strata::current_strategy() == &strata::get_strategy().any());
  CHECK_FALSE(strata::current_scope().has_value());
}

TEST_CASE("bad replica counts are rejected with a clear error") {
  CHECK_THROWS_WITH(strata::cpu_replicas(-1), doctest::Contains("must be positive"));
  CHECK_THROWS_WITH(strata::MirroredStrategy(std::vector<strata::Device>{}), doctest::Contains("at least one device"));
  CHECK(strata::cpu_replicas().size() == std::max(1u, std::thread::hardware_concurrency()));
}

TEST_CASE("with_strategy builds the strategy a name gives, and refuses unknown names") {
  struct Seen {
    strata::PlacementKind placement;
    int replicas;
  };
  auto probe = [](auto& s) { return Seen{s.any().placement(), s.num_replicas_in_sync()}; };
  // every in-process name of the catalogue: its placement; the replicas asked of those that take them
  for (const auto& info : strata::strategy_catalog) {
    if (info.needs_mpi) continue;
    CAPTURE(std::string(info.name));
    const auto seen = strata::with_strategy(info.name, 3, probe);
    CHECK(seen.placement == info.placement);
    if (info.takes_replicas) CHECK(seen.replicas == 3);
  }
  CHECK(strata::with_strategy("default", 3, probe).replicas == 1);
  CHECK(strata::with_strategy("one_device", 3, probe).replicas == 1);
  CHECK(strata::with_strategy("central_storage", 2, probe).replicas == 2);
  // pipeline: stages x data_parallel replicas, the micro-batches and schedule asked for
  struct Piped {
    int replicas;
    std::size_t micro_batches;
    strata::Schedule schedule;
  };
  auto piped = strata::with_strategy(
      "pipeline",
      strata::StrategyChoice{.stages = 3, .micro_batches = 8, .data_parallel = 2, .schedule = strata::Schedule::GPipe},
      [](auto& s) {
        if constexpr (requires { s.pipeline_options(); })
          return Piped{s.num_replicas_in_sync(), s.pipeline_options().micro_batches, s.pipeline_options().schedule};
        else
          return Piped{-1, 0, strata::Schedule::Naive};
      });
  CHECK(piped.replicas == 6);  // 2 copies of 3 stages
  CHECK(piped.micro_batches == 8);
  CHECK(piped.schedule == strata::Schedule::GPipe);
  CHECK_THROWS_WITH_AS(strata::with_strategy("mirored", 2, probe), doctest::Contains("unknown strategy 'mirored'"),
                       strata::Error);
}

TEST_CASE("cpu_replicas_for_batch: one per core, but never fewer than min_rows rows each") {
  const auto cores = static_cast<std::size_t>(std::max(1u, std::thread::hardware_concurrency()));
  CHECK(strata::cpu_replicas_for_batch(1).size() == 1);
  CHECK(strata::cpu_replicas_for_batch(0).size() == 1);
  CHECK(strata::cpu_replicas_for_batch(63).size() == std::min<std::size_t>(1, cores));
  CHECK(strata::cpu_replicas_for_batch(128).size() == std::min<std::size_t>(4, cores));
  CHECK(strata::cpu_replicas_for_batch(1 << 20).size() == cores);
  CHECK(strata::cpu_replicas_for_batch(128, 8).size() == std::min<std::size_t>(16, cores));
  CHECK(strata::cpu_replicas_for_batch(128, 0).size() == cores);
}

}  // namespace strategy_test
