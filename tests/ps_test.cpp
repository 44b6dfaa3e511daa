// Partitioners and sharded variables (the parameter server's placement):
// TensorFlow's documented examples, sizes that do not divide, edges, errors.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <strata/ps/partitioner.hpp>
#include <strata/ps/shard_store.hpp>
#include <strata/ps/sharded_variable.hpp>
#include <strata/ps/staleness.hpp>

#include "watchdog.hpp"

using namespace std::chrono_literals;

using strata::Shape;
using strata::Tensor;

TEST_CASE("partitioners decide as TensorFlow's do") {
  const Shape six{6, 1};  // 6 rows of one float32: 24 bytes
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 2}(six, 4) == 2);
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 10}(six, 4) == 6);
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 100, .max_shards = 10}(six, 4) == 1);  // too small to split
  CHECK(strata::MinSizePartitioner{}(Shape{784, 128}, 4) == 1);                                // the default: 1 shard
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 64 << 10, .max_shards = 4}(Shape{784, 128}, 4) == 4);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 4}(six, 4) == 6);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 4, .max_shards = 2}(six, 4) == 2);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 1024}(six, 4) == 1);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 9}(six, 4) == 3);        // two rows per shard
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 1}(Shape{3, 10}, 4) == 3);  // a row is never split
  CHECK(strata::FixedShardsPartitioner{.num_shards = 2}(Shape{10, 3}, 4) == 2);
  CHECK(strata::FixedShardsPartitioner{.num_shards = 5}(Shape{3, 3}, 4) == 3);  // at most one per row
  // edges: a scalar, an empty variable
  CHECK(strata::FixedShardsPartitioner{.num_shards = 4}(Shape{}, 4) == 1);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 4}(Shape{0, 7}, 4) == 1);
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 1, .max_shards = 3}(Shape{0, 7}, 4) == 1);
  // nonsense settings say what is wrong
  CHECK_THROWS_WITH_AS((void)strata::FixedShardsPartitioner{.num_shards = 0}(six, 4), doctest::Contains("num_shards"),
                       strata::Error);
  CHECK_THROWS_AS((void)strata::MinSizePartitioner{.min_shard_bytes = 0}(six, 4), strata::Error);
  const strata::MinSizePartitioner no_shards{.min_shard_bytes = 4, .max_shards = 0};
  CHECK_THROWS_AS((void)no_shards(six, 4), strata::Error);
  CHECK_THROWS_WITH_AS((void)strata::MaxSizePartitioner{}(six, 4), doctest::Contains("max_shard_bytes"), strata::Error);
  static_assert(strata::Partitioner<strata::MinSizePartitioner>);
}

TEST_CASE("shards split rows as evenly as possible, the first ones longer") {
  const auto r = strata::partition_rows(Shape{10, 3}, 4);
  REQUIRE(r.size() == 4);
  CHECK(r[0] == strata::Range{0, 3});
  CHECK(r[1] == strata::Range{3, 6});
  CHECK(r[2] == strata::Range{6, 8});
  CHECK(r[3] == strata::Range{8, 10});
  CHECK_THROWS_AS(strata::partition_rows(Shape{10, 3}, 0), strata::Error);
}

TEST_CASE("a sharded variable reads and writes as one variable") {
  Tensor<float> init{{7, 3}};
  std::iota(init.data(), init.data() + init.size(), 0.f);
  strata::ShardedVariable<float> v{init, strata::FixedShardsPartitioner{.num_shards = 3}};
  REQUIRE(v.num_shards() == 3);
  CHECK(v.shape() == init.shape());
  CHECK(v.shard(0).shape() == Shape{3, 3});
  CHECK(v.shard(2).shape() == Shape{2, 3});
  CHECK(v.rows(1) == strata::Range{3, 5});
  CHECK(v.elements(1) == strata::Range{9, 15});
  CHECK(v.shard(1)[0] == 9.f);  // row 3 of the whole
  CHECK(v.shard_of_row(6) == 2);
  CHECK_THROWS_AS((void)v.shard_of_row(7), strata::Error);
  const Tensor<float> whole = v.value();
  CHECK(std::equal(whole.data(), whole.data() + whole.size(), init.data()));
  Tensor<float> next{{7, 3}};
  next.fill(2.5f);
  v.assign(next);
  CHECK(v.shard(2)[5] == 2.5f);
  CHECK(v.value()[20] == 2.5f);
  CHECK_THROWS_AS(v.assign(Tensor<float>{{3, 7}}), strata::ShapeError);  // same size, another shape: refused
  CHECK(v.value()[0] == 2.5f);                                           // and nothing changed
  // more shards than rows, none, and the edges that still work
  CHECK_THROWS_WITH_AS((strata::ShardedVariable<float>(init, 8)), doctest::Contains("a row is never split"),
                       strata::ShapeError);
  CHECK_THROWS_AS((strata::ShardedVariable<float>(init, 0)), strata::Error);
  strata::ShardedVariable<double> scalar{Tensor<double>{Shape{}}, strata::MaxSizePartitioner{.max_shard_bytes = 1}};
  CHECK(scalar.num_shards() == 1);
  strata::ShardedVariable<float> empty{Tensor<float>{{0, 4}}, 1};
  CHECK(empty.value().size() == 0);
  strata::ShardedVariable<std::int32_t> bias{Tensor<std::int32_t>{{5}}, strata::MinSizePartitioner{.min_shard_bytes = 8, .max_shards = 9}};
  CHECK(bias.num_shards() == 2);  // 20 bytes hold two shards of at least 8
}

namespace {
// W workers take `steps` steps each under `clock`; worker w sleeps delay(w)
// per step. Every worker checks, at the start of each step, that no live
// worker is more than the bound behind (the finished counts only grow, so
// reading them after begin() returns is a valid check). Returns the
// largest lag seen.
template <class Delay>
std::uint64_t run_workers(strata::StalenessClock& clock, int steps, Delay delay) {
  const int W = clock.workers();
  std::vector<std::atomic<std::uint64_t>> finished(static_cast<std::size_t>(W));
  std::atomic<std::uint64_t> worst{0};
  std::atomic<bool> violated{false};
  std::vector<std::thread> ts;
  for (int w = 0; w < W; ++w)
    ts.emplace_back([&, w] {
      for (int s = 0; s < steps; ++s) {
        const std::uint64_t c = clock.begin(w);
        for (int v = 0; v < W; ++v) {
          const std::uint64_t f = finished[static_cast<std::size_t>(v)].load();
          if (f >= static_cast<std::uint64_t>(steps)) continue;  // done: holds nobody back
          const std::uint64_t lag = c > f ? c - f : 0;
          std::uint64_t prev = worst.load();
          while (lag > prev && !worst.compare_exchange_weak(prev, lag)) {
          }
          if (clock.bound() && lag > *clock.bound()) violated = true;
        }
        std::this_thread::sleep_for(delay(w));
        finished[static_cast<std::size_t>(w)].fetch_add(1);
        clock.end(w);
      }
      clock.retire(w);
    });
  for (auto& t : ts) t.join();
  CHECK_FALSE(violated.load());
  return worst.load();
}
}  // namespace

TEST_CASE("staleness bound 0 is lock-step; bound k lets workers run at most k steps ahead") {
  strata_test::Watchdog dog("staleness clock", 120s);
  strata::StalenessClock sync{3, 0, 30s};
  CHECK(run_workers(sync, 40, [](int) { return 0us; }) == 0);
  CHECK(sync.max_observed_gap() == 0);
  // one worker 20x slower: the others run ahead, but never more than 2 steps
  strata::StalenessClock two{3, 2, 30s};
  const auto lag = run_workers(two, 30, [](int w) { return w == 0 ? 2000us : 100us; });
  CHECK(lag <= 2);
  CHECK(lag >= 1);  // and they do run ahead
  CHECK(two.max_observed_gap() <= 2);
  CHECK(two.clock(1) == 30);
}

TEST_CASE("without a bound a fast worker never waits for a stalled one") {
  strata_test::Watchdog dog("unbounded staleness", 60s);
  strata::StalenessClock clock{2, std::nullopt, 1s};
  std::atomic<bool> fast_done{false};
  std::thread slow([&] {
    clock.begin(1);
    while (!fast_done) std::this_thread::sleep_for(1ms);  // stalled inside its first step
    clock.end(1);
  });
  for (int s = 0; s < 50; ++s) {
    clock.begin(0);
    clock.end(0);
  }
  fast_done = true;
  slow.join();
  CHECK(clock.clock(0) == 50);
  CHECK(clock.max_observed_gap() >= 49);
}

TEST_CASE("a retired worker holds nobody back; a missing one is named within the timeout") {
  strata_test::Watchdog dog("retire and timeout", 60s);
  strata::StalenessClock clock{2, 0, 300ms};
  clock.begin(0);
  clock.end(0);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    clock.begin(0);  // worker 1 never took its first step
    FAIL_CHECK("no timeout");
  } catch (const strata::CollectiveTimeout& e) {
    CHECK(std::string(e.what()).find("worker 1 (finished 0 steps)") != std::string::npos);
    CHECK(std::string(e.what()).find("staleness bound 0") != std::string::npos);
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 300ms);
  CHECK(waited < 5s);
  clock.retire(1);  // worker 1 failed: the others go on
  for (int s = 0; s < 5; ++s) {
    clock.begin(0);
    clock.end(0);
  }
  CHECK(clock.clock(0) == 6);
  CHECK_THROWS_WITH_AS(clock.begin(1), doctest::Contains("retired"), strata::Error);
  CHECK_THROWS_WITH_AS(clock.end(0), doctest::Contains("began no step"), strata::Error);
  clock.begin(0);
  CHECK_THROWS_WITH_AS(clock.begin(0), doctest::Contains("already began"), strata::Error);
  CHECK_THROWS_AS(clock.begin(2), strata::Error);
  CHECK_THROWS_AS((strata::StalenessClock{0, 0, 1s}), strata::Error);
}

TEST_CASE("a shard store serves concurrent pushes and pulls: every update applied once, no torn reads") {
  strata_test::Watchdog dog("shard store", 120s);
  Tensor<float> init{{10, 4}};
  init.fill(1000.f);
  strata::ShardStore<float> store{strata::ShardedVariable<float>{init, 3}, 2};
  REQUIRE(store.num_shards() == 3);
  CHECK(store.server_of(0) == 0);
  CHECK(store.server_of(1) == 1);
  CHECK(store.server_of(2) == 0);
  CHECK(store.elements(1) == strata::Range{16, 28});
  // 4 workers push a gradient of ones to every shard 200 times (w -= g), and
  // pull every shard in between: a pulled shard is always uniform (an update
  // is never seen half-applied) and its value matches its version
  constexpr int workers = 4, rounds = 200;
  std::atomic<bool> torn{false}, offset_wrong{false};
  std::vector<std::thread> ts;
  for (int w = 0; w < workers; ++w)
    ts.emplace_back([&] {
      std::vector<float> buf;
      for (int r = 0; r < rounds; ++r)
        for (std::size_t i = 0; i < store.num_shards(); ++i) {
          const strata::Range e = store.elements(i);
          std::vector<float> g(e.size(), 1.f);
          store.push(i, g, [&](std::span<float> v, std::span<const float> grad, std::size_t offset) {
            if (offset != e.begin) offset_wrong = true;
            for (std::size_t k = 0; k < v.size(); ++k) v[k] -= grad[k];
          });
          buf.resize(e.size());
          const auto version = store.pull(i, buf);
          for (float x : buf)
            if (x != buf[0] || x != 1000.f - static_cast<float>(version)) torn = true;
        }
    });
  for (auto& t : ts) t.join();
  CHECK_FALSE(torn.load());
  CHECK_FALSE(offset_wrong.load());
  for (std::size_t i = 0; i < 3; ++i) CHECK(store.version(i) == workers * rounds);
  const Tensor<float> v = store.value();
  CHECK(v[0] == 1000.f - workers * rounds);
  CHECK(v[39] == 1000.f - workers * rounds);
  // per server: server 0 holds shards 0 and 2, server 1 shard 1
  CHECK(store.pushes(0) == 2u * workers * rounds);
  CHECK(store.pushes(1) == 1u * workers * rounds);
  CHECK(store.pulls(1) >= 1u * workers * rounds);
  // mismatched sizes and shards that do not exist are refused, and change nothing
  std::vector<float> small(3);
  CHECK_THROWS_AS((void)store.pull(0, small), strata::ShapeError);
  CHECK_THROWS_AS((void)store.push(0, small, [](auto, auto, auto) {}), strata::ShapeError);
  CHECK_THROWS_WITH_AS((void)store.version(3), doctest::Contains("no shard 3"), strata::Error);
  CHECK(store.version(0) == workers * rounds);
  CHECK_THROWS_AS((strata::ShardStore<float>{strata::ShardedVariable<float>{init, 1}, 0}), strata::Error);
}
