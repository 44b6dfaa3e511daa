// Custom training loops (issue 23): Sequential::train_step over an iterated
// strategy.distribute(ds) is fit's step, so the loop gives fit's weights bit
// for bit under every in-process strategy fit runs under; a gradient hook
// sees (and may change) each replica's gradient before the reduction; a
// DistributedBatch gives each replica its rows; what cannot work says why.
// The multi-worker case is tests/mpi/custom_loop_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "strategy/strategy_sweep.hpp"

namespace custom_loop_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;

namespace {

// 70 rows in batches of 16: a last partial batch (6 rows) and uneven splits.
const strata_test::Blobs& data() {
  static const strata_test::Blobs d = strata_test::blobs(70, 3);
  return d;
}
auto dataset() { return strata::data::from_tensor_slices(data().x, data().y).shuffle(70, 9).batch(16); }

// An MLP with L2 and dropout (masks keyed by step and replica), Adam.
template <class S>
nn::Sequential make_model(S& s) {
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{12, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                          nn::Dropout{0.25f}, nn::Dense{8}, nn::ReLU{}, nn::Dense{3}};
  });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 5});
  return model;
}

struct Trained {
  std::vector<float> weights;
  std::vector<double> losses;  // per epoch
};

constexpr int epochs = 2;

template <class S>
Trained with_fit(S& s) {
  auto model = make_model(s);
  const auto h = model.fit(s.distribute(dataset()), {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  Trained t{strata_test::flat_weights(model), {}};
  for (const auto& logs : h.epochs()) t.losses.push_back(logs.at("loss"));
  return t;
}

// The custom loop docs/custom-loops.md shows, without the hook.
template <class S>
Trained with_loop(S& s, const nn::GradientHook& hook = {}) {
  auto model = make_model(s);
  auto train = s.distribute(dataset());
  Trained t;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    model.reset_metrics();
    nn::Logs logs;
    for (const auto& batch : train) logs = model.train_step(batch, hook);
    t.losses.push_back(logs.at("loss"));
  }
  t.weights = strata_test::flat_weights(model);
  return t;
}

void same(const Trained& loop, const Trained& fit) {
  CHECK(loop.weights == fit.weights);  // bitwise
  REQUIRE(loop.losses.size() == fit.losses.size());
  for (std::size_t e = 0; e < fit.losses.size(); ++e)  // the same sums, added per step instead of per replica
    CHECK(loop.losses[e] == doctest::Approx(fit.losses[e]).epsilon(1e-12));
}

}  // namespace

TEST_CASE("a custom loop of train_step gives fit's weights bit for bit under every strategy and backend") {
  // (a hook's path, the gradients copied to it through host memory from GPU
  // replicas: the halving test below, under the same sweep)
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true},
      [](auto& s, const strata::StrategyInfo&, strata_test::Backend) { same(with_loop(s), with_fit(s)); });
}

// What the sweep's small choice does not reach: a sharded update (3
// replicas), a pipeline's middle stage (3 stages), copies of a pipeline.
TEST_CASE("a custom loop gives fit's weights bit for bit with a sharded update and deeper pipelines") {
  SUBCASE("mirrored, 3 replicas, sharded update") {
    strata::MirroredStrategy s{strata::cpu_replicas(3)};
    s.executor_options().sharded_update = strata::ShardedUpdate::On;
    same(with_loop(s), with_fit(s));
  }
  SUBCASE("pipeline, 3 stages, 2 micro-batches") {
    strata::PipelineStrategy s{strata::cpu_replicas(3)};
    s.pipeline_options().micro_batches = 2;
    same(with_loop(s), with_fit(s));
  }
  SUBCASE("pipeline, 2 copies of 2 stages") {
    strata::PipelineStrategy s{strata::cpu_replicas(4)};
    s.pipeline_options().data_parallel = 2;
    same(with_loop(s), with_fit(s));
  }
}

// Halving every replica's gradient before the reduction halves the summed
// gradient exactly (a power of two), which plain SGD at half the learning
// rate applies: the same bits. So the hook's changes are what is reduced.
template <class S>
void halving_is_half_the_rate(S& s) {
  const auto run = [&](double lr, const nn::GradientHook& hook) {
    auto model = s.scope(strata_test::blobs_mlp);
    model.compile(nn::SGD{lr}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 2});
    for (const auto& batch : s.distribute(dataset())) model.train_step(batch, hook);
    return strata_test::flat_weights(model);
  };
  const auto half = run(0.1, [](strata::ReplicaGradient& g) {
    for (float& v : g.values) v *= 0.5f;
  });
  CHECK(half == run(0.05, {}));
  CHECK(half != run(0.1, {}));
}

TEST_CASE("the gradient hook's changes are what the strategy reduces and applies (a pipeline: each stage's slice)") {
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true},
      [](auto& s, const strata::StrategyInfo&, strata_test::Backend) { halving_is_half_the_rate(s); });
}

TEST_CASE("the gradient hook's changes are what a sharded update applies (3 replicas: the sweep's 2 do not shard)") {
  strata::MirroredStrategy s{strata::cpu_replicas(3)};
  s.executor_options().sharded_update = strata::ShardedUpdate::On;
  halving_is_half_the_rate(s);
}

// What the hook is told: each replica's rows, ids, and which slice it holds.
// 4 replicas (1 under default and one_device, a stage each under pipeline's
// 2) share 10 rows unevenly.
TEST_CASE("the gradient hook sees each replica's rows, id and slice of the parameters") {
  struct Seen {
    int replica;
    std::size_t offset, size, params, rows, global;
    int replicas;
  };
  std::mutex mu;
  std::vector<Seen> seen;
  const nn::GradientHook record = [&](strata::ReplicaGradient& g) {
    const std::lock_guard lock{mu};
    seen.push_back({g.replica, g.offset, g.values.size(), g.params, g.rows, g.global, g.replicas});
  };
  const auto one_batch = strata::data::from_tensor_slices(data().x, data().y).take(10).batch(10);
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true},
      [&](auto& s, const strata::StrategyInfo& info, strata_test::Backend) {
        seen.clear();
        auto model = s.scope(strata_test::blobs_mlp);
        model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
        for (const auto& b : s.distribute(one_batch)) model.train_step(b, record);
        const int n = s.num_replicas_in_sync();
        REQUIRE(seen.size() == static_cast<std::size_t>(n));
        if (info.whole_model) {  // every replica the whole gradient of its rows
          REQUIRE((n == 1 || n == 4));
          const std::vector<std::size_t> rows = n == 1 ? std::vector<std::size_t>{10} : std::vector<std::size_t>{3, 3, 2, 2};
          std::sort(seen.begin(), seen.end(), [](const Seen& a, const Seen& b) { return a.replica < b.replica; });
          for (int r = 0; r < n; ++r) {
            const Seen& x = seen[static_cast<std::size_t>(r)];
            CHECK(x.replica == r);
            CHECK(x.replicas == n);
            CHECK(x.offset == 0);
            CHECK(x.size == model.count_params());
            CHECK(x.params == model.count_params());
            CHECK(x.rows == rows[static_cast<std::size_t>(r)]);
            CHECK(x.global == 10);
          }
        } else {  // a pipeline: every stage its slice, the slices covering the parameters once
          REQUIRE(n == 2);
          std::sort(seen.begin(), seen.end(), [](const Seen& a, const Seen& b) { return a.offset < b.offset; });
          CHECK(seen[0].offset == 0);
          CHECK(seen[0].size > 0);
          CHECK(seen[1].offset == seen[0].size);
          CHECK(seen[1].offset + seen[1].size == model.count_params());
          for (const Seen& x : seen) CHECK((x.rows == 10 && x.global == 10 && x.replicas == 2));
        }
        CHECK(model.iterations() == 1);
      },
      strata_test::small_choice(4));
}

TEST_CASE("a hook that makes the gradient non-finite skips the step, as fit's check does") {
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true}, [](auto& s, const strata::StrategyInfo&, strata_test::Backend) {
        auto model = s.scope(strata_test::blobs_mlp);
        model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 1});
        auto train = s.distribute(dataset());
        model.build(strata::Shape{6});
        const auto before = strata_test::flat_weights(model);
        for (const auto& b : train)  // the last replica's (a pipeline: the last stage's) gradient only
          model.train_step(b, [](strata::ReplicaGradient& g) {
            if (g.replica == g.replicas - 1) g.values[0] = std::nanf("");
          });
        CHECK(strata_test::flat_weights(model) == before);
        CHECK(model.iterations() == 0);
      });
}

// A hook that throws on the last replica fails that step (no update
// anywhere), naming the replica; the model and strategy stay usable.
template <class S>
void a_throwing_hook_fails_the_step(S& s) {
  const int last = s.num_replicas_in_sync() - 1;
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 1});
  auto train = s.distribute(dataset());
  model.build(strata::Shape{6});
  const auto before = strata_test::flat_weights(model);
  auto it = train.begin();
  try {
    model.train_step(*it, [last](strata::ReplicaGradient& g) {
      if (g.replica == last) throw std::runtime_error("hook refused");
    });
    FAIL("the step did not fail");
  } catch (const strata::ReplicaError& e) {
    CHECK(e.replica() == last);
    CHECK(std::string(e.what()).find("hook refused") != std::string::npos);
  }
  CHECK(model.iterations() == 0);
  CHECK(strata_test::flat_weights(model) == before);
  model.train_step(*it);
  CHECK(model.iterations() == 1);
  CHECK(strata_test::flat_weights(model) != before);
}

TEST_CASE("a hook that throws fails its step on every replica, naming the replica; training goes on after") {
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true},
      [](auto& s, const strata::StrategyInfo&, strata_test::Backend) { a_throwing_hook_fails_the_step(s); });
}

TEST_CASE("train_step's logs accumulate until reset_metrics") {
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true}, [](auto& s, const strata::StrategyInfo&, strata_test::Backend) {
        auto model = make_model(s);
        auto train = s.distribute(dataset());
        nn::Logs first, all;
        int steps = 0;
        for (const auto& b : train) {
          all = model.train_step(b);
          if (steps++ == 0) first = all;
        }
        CHECK(steps == 5);
        CHECK(all.at("loss") != first.at("loss"));
        model.reset_metrics();
        auto it = train.begin();
        const nn::Logs fresh = model.train_step(*it);
        CHECK(std::isfinite(fresh.at("loss")));
        CHECK(fresh.at("accuracy") >= 0.0);
        CHECK(model.iterations() == 6);
      });
}

// 4 replicas (1 under default and one_device) share 10 rows unevenly, then 1.
TEST_CASE("iterating a distributed dataset gives every replica its rows of each global batch") {
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true, .whole_model = true},
      [](auto& s, const strata::StrategyInfo&, strata_test::Backend) {
        const int n = s.num_replicas_in_sync();
        const auto un = static_cast<std::size_t>(n);
        auto ten = s.distribute(strata::data::from_tensor_slices(data().x, data().y).take(11).batch(10));
        std::size_t batches = 0;
        for (const auto& batch : ten) {
          const std::size_t rows_in_batch = batch.size();  // 10, then 1
          std::vector<std::size_t> rows(un);
          std::vector<float> firsts(un, -9.f);
          s.run([&](auto& ctx) {
            const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
            const auto local = batch.local(ctx);
            const auto& x = std::get<0>(local);
            rows[r] = x.shape()[0];
            CHECK(std::get<1>(local).shape()[0] == rows[r]);
            if (rows[r]) firsts[r] = x[0];
          });
          for (int r = 0; r < n; ++r) {
            const strata::Range want = strata::shard_range(rows_in_batch, un, static_cast<std::size_t>(r));
            CHECK(rows[static_cast<std::size_t>(r)] == want.size());
            CHECK(batch.rows_of(r).begin == want.begin);
            if (want.size())
              CHECK(firsts[static_cast<std::size_t>(r)] == std::get<0>(batch.global())[want.begin * 6]);
          }
          ++batches;
        }
        CHECK(batches == 2);
        auto first = ten.begin();
        const std::string no_part = "replica " + std::to_string(n) + " takes no part of this batch";
        CHECK_THROWS_WITH_AS((void)(*first).rows_of(n), doctest::Contains(no_part.c_str()), strata::Error);
      },
      strata_test::small_choice(4));
}

TEST_CASE("a custom loop says why where it cannot run") {
  SUBCASE("a batch distributed by another strategy") {
    strata::MirroredStrategy a{strata::cpu_replicas(2)}, b{strata::cpu_replicas(2)};
    auto model = make_model(a);
    auto other = b.distribute(dataset());
    CHECK_THROWS_WITH_AS(model.train_step(*other.begin()), doctest::Contains("distributed by another strategy"),
                         strata::Error);
  }
  SUBCASE("not compiled") {
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    auto model = s.scope(strata_test::blobs_mlp);
    CHECK_THROWS_WITH_AS(model.train_step(*s.distribute(dataset()).begin()), doctest::Contains("compile the model first"),
                         strata::Error);
  }
  SUBCASE("one GPU (the host's compute): the hook's changes reach the update") {
    strata_test::HostAsGpu host;
    strata::OneDeviceStrategy s{strata::gpu(0)};  // (train_step is fit's step there: the sweep above)
    // a hook that zeroes the gradient: Adam, from fresh state, leaves the weights as they were
    auto model = make_model(s);
    model.build(strata::Shape{6});
    const auto before = model.get_weights();
    std::size_t seen = 0;
    model.train_step(*s.distribute(dataset()).begin(), [&](strata::ReplicaGradient& g) {
      seen = g.values.size();
      CHECK(g.replicas == 1);
      for (float& v : g.values) v = 0.f;
    });
    CHECK(seen == model.count_params());
    CHECK(model.iterations() == 1);
    const auto after = model.get_weights();
    for (std::size_t i = 0; i < before.size(); ++i)
      CHECK(std::equal(before[i].value.data(), before[i].value.data() + before[i].value.size(), after[i].value.data()));
    // a NaN the hook writes is counted after it: the step is skipped
    model.train_step(*s.distribute(dataset()).begin(), [](strata::ReplicaGradient& g) { g.values[0] = NAN; });
    CHECK(model.iterations() == 1);
  }
  SUBCASE("parameter servers: asynchronous steps") {
    strata::ParameterServerStrategy s{{.workers = 2, .servers = 1, .staleness = std::uint64_t{0}}};
    auto model = s.scope(strata_test::blobs_mlp);
    model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
    auto train = s.distribute(dataset());
    CHECK_THROWS_WITH_AS(model.train_step(*train.begin()),
                         doctest::Contains("ParameterServerStrategy trains asynchronously"), strata::Error);
  }
}

}  // namespace custom_loop_test
