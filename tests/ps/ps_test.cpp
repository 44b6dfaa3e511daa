// The parameter server's parts: partitioners and sharded variables
// (TensorFlow's documented examples, sizes that do not divide, edges,
// errors), the staleness clock, the servers' shard store, the coordinator
// that schedules for both transports (failures rescheduled; timeouts,
// transport failures and round hooks that fail end the run), and the
// staleness bound measured on real pushes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/ps/cluster_spec.hpp>
#include <strata/ps/coordinator.hpp>
#include <strata/ps/in_process.hpp>
#include <strata/ps/partitioner.hpp>
#include <strata/ps/shard_store.hpp>
#include <strata/ps/sharded_variable.hpp>
#include <strata/ps/staleness.hpp>
#include <strata/ps/step.hpp>

#include "support/watchdog.hpp"

namespace ps_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

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

TEST_CASE("a shard store lays several variables end to end, shards round-robin over the servers") {
  Tensor<float> a{{5, 2}}, b{{3}};
  std::iota(a.data(), a.data() + a.size(), 0.f);
  std::iota(b.data(), b.data() + b.size(), 100.f);
  strata::ShardStore<float> store{{strata::ShardedVariable<float>{a, 2}, strata::ShardedVariable<float>{b, 2}}, 3};
  REQUIRE(store.num_shards() == 4);
  CHECK(store.total_elements() == 13);
  CHECK(store.elements(0) == strata::Range{0, 6});    // rows 0-2 of a
  CHECK(store.elements(1) == strata::Range{6, 10});   // rows 3-4 of a
  CHECK(store.elements(2) == strata::Range{10, 12});  // b[0:2]
  CHECK(store.elements(3) == strata::Range{12, 13});
  CHECK(store.server_of(3) == 0);
  std::vector<float> all(13);
  store.value(all);
  CHECK(all[5] == 5.f);
  CHECK(all[10] == 100.f);
  CHECK(all[12] == 102.f);
  // shards that are not consecutive ranges, or leave elements out, are refused
  CHECK_THROWS_WITH_AS((strata::ShardStore<float>{Tensor<float>{{4}}, {{0, 2}, {3, 4}}, 1}),
                       doctest::Contains("consecutive"), strata::Error);
  CHECK_THROWS_WITH_AS((strata::ShardStore<float>{Tensor<float>{{4}}, {{0, 2}}, 1}), doctest::Contains("cover 2"),
                       strata::Error);
}

TEST_CASE("staged gradients are applied once per round: their mean, summed in worker order") {
  Tensor<float> init{{4}};
  strata::ShardStore<float> store{strata::ShardedVariable<float>{init, 2}, 1};
  std::vector<std::uint64_t> steps;
  const auto sgd = [&](std::span<float> w, std::span<const float> g, std::size_t, std::uint64_t step) {
    steps.push_back(step);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= g[i];
  };
  const std::vector<float> g1{2, 2}, g3{4, 4};
  store.stage(0, 3, g3);  // arrival order does not matter
  store.stage(0, 1, g1);
  store.stage(1, 1, g1);
  CHECK(store.version(0) == 0);  // nothing applied before the round ends
  CHECK(store.apply_staged(sgd) == 2);
  std::vector<float> v(4);
  store.value(v);
  CHECK(v == std::vector<float>{-3, -3, -2, -2});  // shard 0: mean of 2 and 4; shard 1: 2 alone
  CHECK(store.version(0) == 1);
  CHECK(steps == std::vector<std::uint64_t>{0, 0});
  CHECK(store.apply_staged(sgd) == 0);  // nothing staged: nothing changes
  store.stage(0, 0, g1);
  store.drop_staged(0);  // a failed worker's gradient does not count
  CHECK(store.apply_staged(sgd) == 0);
  CHECK(store.version(0) == 1);
}

TEST_CASE("the coordinator runs every scheduled step once and returns each result") {
  strata_test::Watchdog dog("coordinator", 120s);
  for (int workers : {1, 3, 8}) {  // 8: more workers than cores
    CAPTURE(workers);
    strata::Coordinator c{{.workers = workers}};
    std::atomic<int> runs{0};
    std::vector<strata::RemoteValue<int>> out;
    for (int i = 0; i < 50; ++i)
      out.push_back(c.schedule([&runs, i](strata::WorkerContext& w) {
        ++runs;
        CHECK(w.attempt() == 0);
        return i * i + w.worker() * 0;
      }));
    c.join();
    CHECK(runs.load() == 50);
    for (int i = 0; i < 50; ++i) {
      CHECK(out[static_cast<std::size_t>(i)].ready());
      CHECK(out[static_cast<std::size_t>(i)].get() == i * i);
      CHECK(out[static_cast<std::size_t>(i)].step() == static_cast<std::uint64_t>(i));
    }
    CHECK(c.failures().empty());
    auto v = c.schedule([](strata::WorkerContext&) {});  // void steps too; the coordinator is reusable
    c.join();
    v.get();
  }
  CHECK_THROWS_AS((strata::Coordinator{{.workers = 0}}), strata::Error);
}

TEST_CASE("a worker that fails a step is reported, and the step is rescheduled on another worker") {
  strata_test::Watchdog dog("coordinator failure", 120s);
  std::vector<strata::WorkerFailure> seen;
  std::mutex mu;
  strata::Coordinator c{{.workers = 3, .on_failure = [&](const strata::WorkerFailure& f) {
                           std::lock_guard lk(mu);
                           seen.push_back(f);
                         }}};
  std::atomic<bool> failed_once{false};
  std::atomic<int> failer{-1};  // whichever worker runs step 5 or later first (scheduling decides which)
  std::vector<std::atomic<int>> done(40);
  std::vector<strata::RemoteValue<int>> out;
  for (int i = 0; i < 40; ++i)
    out.push_back(c.schedule([&, i](strata::WorkerContext& w) {
      if (i >= 5 && !failed_once.exchange(true)) {
        failer = w.worker();
        throw std::runtime_error("injected: disk on fire");
      }
      ++done[static_cast<std::size_t>(i)];
      return w.worker();
    }));
  c.join();
  for (int i = 0; i < 40; ++i) CHECK(done[static_cast<std::size_t>(i)].load() == 1);  // each completed exactly once
  REQUIRE(c.failures().size() == 1);
  CHECK(c.failures()[0].worker == failer.load());
  CHECK(out[c.failures()[0].step].get() != failer.load());  // the failed step was completed by another worker
  for (std::size_t i = c.failures()[0].step + 1; i < 40; ++i)
    CHECK(out[i].get() != failer.load());  // a failed worker runs nothing more
  CHECK(c.failures()[0].what.find("disk on fire") != std::string::npos);
  CHECK(seen.size() == 1);
  CHECK(c.live_workers() == 2);
}

TEST_CASE("a step that fails on every worker fails its result and join, naming every failure") {
  strata_test::Watchdog dog("coordinator total failure", 120s);
  strata::Coordinator c{{.workers = 2, .on_failure = [](const strata::WorkerFailure&) {}}};
  auto ok = c.schedule([](strata::WorkerContext&) { return 1; });
  ok.get();
  auto bad = c.schedule([](strata::WorkerContext& w) -> int {
    throw std::runtime_error("bad step on worker " + std::to_string(w.worker()));
  });
  CHECK_THROWS_WITH_AS(c.join(), doctest::Contains("failed on 2 attempt(s)"), strata::Error);
  CHECK_THROWS_WITH_AS((void)bad.get(), doctest::Contains("bad step on worker"), strata::Error);
  CHECK(c.live_workers() == 0);
  CHECK_THROWS_WITH_AS(c.schedule([](strata::WorkerContext&) { return 0; }), doctest::Contains("every worker has failed"),
                       strata::Error);
}

TEST_CASE("RemoteValue::get is bounded: a step that never ends raises CollectiveTimeout naming it") {
  strata_test::Watchdog dog("RemoteValue::get deadline", 60s);  // before: get() waited for ever
  strata::Coordinator c{{.workers = 1, .timeout = 50ms}};
  std::atomic<bool> release{false};
  auto stuck = c.schedule([&](strata::WorkerContext&) {
    while (!release) std::this_thread::sleep_for(1ms);
    return 7;
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS((void)stuck.get(), doctest::Contains("for step 0's result"), strata::CollectiveTimeout);
  CHECK(std::chrono::steady_clock::now() - t0 >= 150ms);  // 3 timeouts past the step's start
  release = true;
  c.join();
  CHECK(stuck.get() == 7);  // once it ended, its result
}

TEST_CASE("destroying a coordinator with steps waiting fails them instead of hanging") {
  strata_test::Watchdog dog("coordinator teardown", 60s);
  strata::RemoteValue<int> late;
  {
    strata::Coordinator c{{.workers = 1, .max_queued = 8}};
    std::atomic<bool> release{false};
    auto first = c.schedule([&](strata::WorkerContext&) {
      while (!release) std::this_thread::sleep_for(1ms);
      return 0;
    });
    late = c.schedule([](strata::WorkerContext&) { return 1; });
    std::thread t([&] {
      std::this_thread::sleep_for(50ms);
      release = true;
    });
    t.join();
    first.get();
  }
  // it either ran before the coordinator went, or failed with a typed error
  // (normally "the coordinator was destroyed before the step ran"; one CI run
  // under ThreadSanitizer saw another message, not reproduced in 40 runs:
  // the wording is not asserted, the outcome is)
  try {
    const int v = late.get();  // outside CHECK: doctest would catch the exception itself
    CHECK(v == 1);
  } catch (const strata::Error& e) {
    const std::string why = e.what();
    INFO(why);
    CHECK_FALSE(why.empty());
  }
}

TEST_CASE("a staleness wait past the timeout ends the run: join names the laggard, waiting steps fail with it") {
  strata_test::Watchdog dog("coordinator staleness timeout", 60s);
  strata::Coordinator c{{.workers = 2, .staleness = 0, .timeout = 300ms}};
  std::atomic<bool> release{false};
  // whichever worker takes step 0 stalls in it; the other finishes step 1
  // and may not start another before the staller finishes its round
  std::vector<strata::RemoteValue<int>> out;
  for (int i = 0; i < 4; ++i)
    out.push_back(c.schedule([&, i](strata::WorkerContext&) {
      if (i == 0)
        while (!release) std::this_thread::sleep_for(1ms);
      return i;
    }));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c.join();
    FAIL_CHECK("join did not report the staleness timeout");
  } catch (const strata::CollectiveTimeout& e) {
    CHECK(std::string(e.what()).find("staleness bound 0") != std::string::npos);
    CHECK(std::string(e.what()).find("(finished 0 steps)") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // bounded: the timeout, then at most one more for step 0
  release = true;
  CHECK(out[0].get() == 0);  // a step in progress is not abandoned
  for (std::size_t i = 2; i < 4; ++i) {
    try {
      const int v = out[i].get();  // outside CHECK: doctest would catch the exception itself
      FAIL_CHECK("step " << v << " ran after the run ended");
    } catch (const strata::CollectiveTimeout&) {
    }
  }
  CHECK(c.failures().empty());  // a timeout is no worker's failure
  CHECK(c.live_workers() == 2);
}

TEST_CASE("a transport failure ends the run without failing a worker; the next run goes on") {
  strata_test::Watchdog dog("coordinator transport failure", 60s);
  strata::Coordinator c{{.workers = 2, .on_failure = [](const strata::WorkerFailure&) {
                           FAIL_CHECK("a transport failure was taken for a worker's");
                         }}};
  auto lost = c.schedule([](strata::WorkerContext& w) -> int {
    throw strata::detail::TransportError(std::make_exception_ptr(
        strata::CollectiveTimeout("rank " + std::to_string(w.worker() + 3) + " never answered")));
  });
  CHECK_THROWS_WITH_AS(c.join(), doctest::Contains("never answered"), strata::CollectiveTimeout);
  CHECK_THROWS_AS((void)lost.get(), strata::CollectiveTimeout);  // the inner error, not the wrapper
  CHECK(c.failures().empty());
  CHECK(c.live_workers() == 2);
  std::vector<strata::RemoteValue<int>> next;
  for (int i = 0; i < 6; ++i) next.push_back(c.schedule([i](strata::WorkerContext&) { return 10 * i; }));
  c.join();  // the error was reported once
  for (int i = 0; i < 6; ++i) CHECK(next[static_cast<std::size_t>(i)].get() == 10 * i);
}

TEST_CASE("a round hook that throws (the servers cannot apply the round) ends the run with its error") {
  strata_test::Watchdog dog("coordinator round hook failure", 60s);
  std::atomic<int> rounds{0};  // before the coordinator: its destructor may still announce a round
  strata::Coordinator c{{.workers = 2, .staleness = 0, .timeout = 10s}};
  c.clock().on_round([&](std::uint64_t n) {
    ++rounds;
    if (n == 2) throw strata::Error("no server applied round 2");
  });
  for (int i = 0; i < 8; ++i) {
    try {
      (void)c.schedule([](strata::WorkerContext&) {});
    } catch (const strata::Error& e) {  // the run may have ended already: schedule says why
      CHECK(std::string(e.what()).find("no server applied round 2") != std::string::npos);
      break;
    }
  }
  CHECK_THROWS_WITH_AS(c.join(), doctest::Contains("no server applied round 2"), strata::Error);
  CHECK(rounds.load() >= 2);
  CHECK(c.failures().empty());
}

// The staleness bound on real pushes: every worker's push adds 1 to its own
// element, so a pull shows how many steps of each worker the parameters
// contain. A worker starting its step c must see at least c - k steps of
// every live worker (SSP: nothing older than k steps is missing); with
// k = 0 exactly c (rounds: nothing of the current round either). Worker 0 is
// 5x slower than the others.
static void check_bound(std::optional<std::uint64_t> k, int workers) {
  strata::InProcessParameterServers ps{{.workers = workers, .servers = 2, .staleness = k,
                                        .partitioner = strata::FixedShardsPartitioner{.num_shards = 2}}};
  ps.create_variables({Shape{static_cast<std::size_t>(workers)}}, Tensor<float>{{static_cast<std::size_t>(workers)}},
                      [](std::span<float> w, std::span<const float> g, std::size_t, std::uint64_t) {
                        for (std::size_t i = 0; i < w.size(); ++i) w[i] += g[i];
                      });
  std::atomic<long long> worst{0};  // the most steps of another worker a pull missed beyond the bound
  std::atomic<bool> saw_future{false};
  std::vector<int> steps_of(static_cast<std::size_t>(workers), 0);
  ps.set_step([&](int w, const strata::StepInput&) {
    const auto c = static_cast<long long>(steps_of[static_cast<std::size_t>(w)]);  // only w touches it
    std::vector<float> seen(static_cast<std::size_t>(workers));
    ps.pull(w, seen);
    if (k == std::uint64_t{0}) {
      // rounds average their pushes: count rounds instead (the shards' versions)
      const auto rounds = static_cast<long long>(ps.store().version(0));
      worst = std::max(worst.load(), c - rounds);
      if (rounds > c) saw_future = true;
    } else {
      for (int v = 0; v < workers; ++v) {
        const auto has = static_cast<long long>(seen[static_cast<std::size_t>(v)]);
        const long long need = c - static_cast<long long>(k.value_or(1u << 30));
        worst = std::max(worst.load(), need - has);
      }
    }
    std::this_thread::sleep_for(w == 0 ? 2500us : 500us);
    std::vector<float> g(static_cast<std::size_t>(workers), 0.f);
    g[static_cast<std::size_t>(w)] = 1.f;
    ps.push(w, g);
    ++steps_of[static_cast<std::size_t>(w)];
    return strata::StepOutput{};
  });
  for (int i = 0; i < 60; ++i) (void)ps.schedule({});
  ps.join();
  CHECK(worst.load() <= 0);
  CHECK_FALSE(saw_future.load());
  CHECK(ps.coordinator().clock().max_observed_gap() <= k.value_or(1u << 30));
  std::vector<float> total(static_cast<std::size_t>(workers));
  ps.read(total);
  if (k != std::uint64_t{0}) {
    CHECK(std::accumulate(total.begin(), total.end(), 0.f) == 60.f);  // every step's push applied once
  } else {
    // one update per round, each the mean of the round's one-hot pushes
    CHECK(ps.store().version(0) == std::accumulate(steps_of.begin(), steps_of.end(), 0) / workers);
    CHECK(std::accumulate(total.begin(), total.end(), 0.f) == doctest::Approx(60.0 / workers));
  }
  if (!k) CHECK(total[0] < total[1]);  // unbounded: the fast workers did more of the steps
}

TEST_CASE("the staleness bound is never violated (instrumented pulls, one worker 5x slower)") {
  strata_test::Watchdog dog("staleness bound", 300s);
  for (int workers : {2, 4}) {
    CAPTURE(workers);
    SUBCASE("k = 0") { check_bound(0, workers); }
    SUBCASE("k = 1") { check_bound(1, workers); }
    SUBCASE("k = 3") { check_bound(3, workers); }
    SUBCASE("unbounded") { check_bound(std::nullopt, workers); }
  }
}

TEST_CASE("cluster specs: roles by counts or written out; bad specs say what is wrong") {
  const auto c = strata::ClusterSpec::from_counts(2, 5);
  CHECK(c.chief == 0);
  CHECK(c.servers == std::vector<int>{1, 2});
  CHECK(c.workers == std::vector<int>{3, 4});
  CHECK(c.role_of(2) == strata::ClusterSpec::Role::Server);
  CHECK(c.worker_index(4) == 1);
  const auto p = strata::ClusterSpec::parse("worker:0,2-3 chief:4;ps:1", 5);
  CHECK(p.chief == 4);
  CHECK(p.servers == std::vector<int>{1});
  CHECK(p.workers == std::vector<int>{0, 2, 3});
  CHECK(p.role_of(0) == strata::ClusterSpec::Role::Worker);
  CHECK(p.server_index(1) == 0);
  const auto bad = [](const char* spec, int world, const char* says) {
    CAPTURE(spec);
    CHECK_THROWS_WITH_AS((void)strata::ClusterSpec::parse(spec, world), doctest::Contains(says), strata::Error);
  };
  bad("chief:0 ps:1 worker:2", 4, "rank 3 of 4 has no role");
  bad("chief:0 ps:1 worker:1,2", 3, "rank 1 has two roles");
  bad("chief:0 ps:1 worker:2,7", 4, "worker rank 7 is outside this job of 4 ranks");
  bad("chief:0 worker:1,2", 3, "no parameter server");
  bad("chief:0 ps:1,2", 3, "no worker");
  bad("ps:1 worker:0,2", 3, "no chief");
  bad("chief:0,1 ps:2 worker:3", 4, "exactly one chief");
  bad("chief:0 evaluator:1 ps:2 worker:3", 4, "unknown role \"evaluator\"");
  bad("chief:0 ps:x worker:2", 3, "expected a rank number");
  bad("chief:0 ps:1 worker:3-2", 4, "empty range");
  bad("chief:0 ps:1 worker:2,", 3, "trailing ','");
  bad("chief:0 ps1 worker:2", 3, "expected role:ranks");
  CHECK_THROWS_WITH_AS((void)strata::ClusterSpec::from_counts(2, 3), doctest::Contains("at least 4 ranks"), strata::Error);
  CHECK_THROWS_AS((void)strata::ClusterSpec::from_counts(0, 3), strata::Error);
}

TEST_CASE("in one process, servers going away apply nothing a run left staged (its update's model is gone)") {
  // A staleness-0 run that ends in error (a timeout) can leave a round
  // incomplete, a worker's gradient staged. When the strategy goes, its
  // coordinator retires the workers, which completes that round: the round
  // hook must not apply it then, through an update whose optimizer belonged
  // to a model destroyed before the strategy (a 1 ms --timeout crashed the
  // examples there).
  strata_test::Watchdog dog("in-process servers' end", 60s);
  std::atomic<bool> gone{false};
  std::atomic<int> applied{0}, applied_late{0};
  {
    strata::InProcessParameterServers rt{{.workers = 2, .servers = 1, .staleness = std::uint64_t{0}}};
    rt.create_variables({Shape{4}}, Tensor<float>{Shape{4}},
                        [&](std::span<float>, std::span<const float>, std::size_t, std::uint64_t) {
      ++applied;
      if (gone) ++applied_late;
    });
    const std::vector<float> g(4, 1.f);
    strata::StalenessClock& clock = rt.coordinator().clock();
    for (int w : {0, 1}) {  // round 1: both workers
      clock.begin(w);
      rt.push(w, g);
      clock.end(w);
    }
    CHECK(applied == 1);
    clock.begin(1);  // round 2: worker 1 only, as when worker 0's wait timed out
    rt.push(1, g);
    clock.end(1);
    CHECK(applied == 1);
    gone = true;
  }
  CHECK(applied_late == 0);
}

}  // namespace ps_test
