// ZeRO stages 2 and 3 (issue 25; parallel/zero/fully_sharded.hpp): the shard
// layout, the weights and optimizer state bitwise those of stages 0 and 1,
// evaluation and prediction through gathered layers, checkpoints across
// stages and replica counts, the per-replica memory formula and its budget,
// a replica failing during a parameter gather named within the deadline,
// and what is refused. GPU replicas (on the host's compute: host_as_gpu.hpp)
// run the same executor over their device collectives and give the CPU bits.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <strata/strata.hpp>
#include <strata/parallel/zero/fully_sharded.hpp>
#include <strata/parallel/zero/shard_buckets.hpp>
#include <strata/parallel/zero/sharded_replica.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "support/identity_layer.hpp"
#include "support/watchdog.hpp"

namespace fully_sharded_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::Range;
using strata::ShardedUpdate;

namespace {

//! The identity; throws in forward on replica `fails` from training step `after`.
class FailsOn final : public strata_test::Identity<FailsOn> {
 public:
  FailsOn(int fails, int after) : fails_(fails), after_(after) {}
  [[nodiscard]] std::string kind() const override { return "FailsOn"; }
  void on_forward(const nn::RunInfo& info) {
    if (info.training && info.replica == fails_ && info.step >= static_cast<std::uint64_t>(after_))
      throw strata::Error("replica " + std::to_string(fails_) + " fails in forward");
  }

 private:
  int fails_, after_;
};

//! Four layers with parameters, L2 on two, dropout between: 112 | 136 | 99 | 33 floats.
nn::Sequential model() {
  return nn::Sequential{nn::Input{{6}},
                        nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::Dense{8, {.l2 = 2e-3f}},
                        nn::ReLU{},
                        nn::Dropout{0.25f},
                        nn::Dense{11, {.activation = nn::Activation::Tanh}},
                        nn::Dense{3}};
}

struct Trained {
  std::vector<float> weights;
  std::vector<strata::Tensor<float>> state;
  double eval_loss = 0;
  std::vector<float> predictions;
  std::string choice;
};

//! `epochs` of Adam on blobs (batches of 10 over p replicas: rows not divisible) at `mode`.
//! With `bytes`, the layers' reduce-scatters by buckets of that size (and compression `c`).
Trained train(int p, ShardedUpdate mode, int epochs = 3, bool gpus = false, std::size_t bytes = 0,
              strata::Compression c = strata::Compression::None) {
  strata::MirroredStrategy s{gpus ? strata::virtual_gpus(0, p) : strata::cpu_replicas(p)};
  s.executor_options().sharded_update = mode;
  s.executor_options().bucket_bytes = bytes;
  s.executor_options().compression = c;
  const auto data = strata_test::blobs(90, 11);
  auto m = s.scope(model);
  m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 7});
  m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(10)),
        {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  Trained t;
  t.weights = strata_test::flat_weights(m);
  t.eval_loss = m.evaluate(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16))).at("loss");
  const auto pred = m.predict(data.x, 7);
  t.predictions.assign(pred.data(), pred.data() + pred.size());
  t.choice = m.gradient_reduction();
  const auto path = std::filesystem::temp_directory_path() /
                    ("strata_fully_sharded_" + std::to_string(::getpid()) + ".ckpt");
  m.save_checkpoint(path);
  strata::io::TensorFile f = strata::io::read_tensor_file(path, "test");
  std::filesystem::remove(path);
  for (const auto& e : f.tensors)
    if (e.name.rfind("optimizer/", 0) == 0) t.state.push_back(e.value);
  return t;
}

//! t's weights, optimizer state, evaluation and predictions are want's, bit for bit.
void check_same(const Trained& t, const Trained& want) {
  CHECK(t.weights == want.weights);
  REQUIRE(t.state.size() == want.state.size());
  for (std::size_t k = 0; k < t.state.size(); ++k)
    CHECK(std::vector<float>(t.state[k].data(), t.state[k].data() + t.state[k].size()) ==
          std::vector<float>(want.state[k].data(), want.state[k].data() + want.state[k].size()));
  CHECK(t.eval_loss == want.eval_loss);
  CHECK(t.predictions == want.predictions);
}

}  // namespace

TEST_CASE("the shard layout: each unit cut over the replicas, a replica's slices end to end") {
  const strata::detail::ShardLayout L({5, 0, 3, 4}, 3);  // units [0,5) [5,8) [8,12); the empty one dropped
  REQUIRE(L.units() == std::vector<Range>{{0, 5}, {5, 8}, {8, 12}});
  CHECK(L.params() == 12);
  CHECK(L.largest() == 5);
  CHECK(L.window_pair() == 5 + 4);  // two adjacent units' windows: the largest and the second largest
  CHECK(L.slice(0, 0) == Range{0, 2});
  CHECK(L.slice(0, 2) == Range{4, 5});
  CHECK(L.owned(0) == 2 + 1 + 2);
  CHECK(L.owned(1) == 2 + 1 + 1);
  CHECK(L.owned(2) == 1 + 1 + 1);
  CHECK(L.owned_at(2, 1) == 3);
  CHECK(L.unit_at(5, 8) == 1);
  CHECK_THROWS_WITH_AS((void)L.unit_at(5, 9), doctest::Contains("not one layer's range"), strata::Error);
  // the owned parts of whole slots and back
  strata::Tensor<float> whole{strata::Shape{12}};
  for (std::size_t i = 0; i < 12; ++i) whole[i] = static_cast<float>(i);
  std::vector<std::vector<strata::Tensor<float>>> parts;
  for (std::size_t r = 0; r < 3; ++r) parts.push_back(strata::detail::owned_part(L, r, {&whole, 1}));
  CHECK(std::vector<float>(parts[1][0].data(), parts[1][0].data() + 4) == std::vector<float>{2, 3, 6, 10});
  const auto back = strata::detail::join_owned(L, [&](std::size_t r) { return parts[r]; });
  REQUIRE(back.size() == 1);
  CHECK(std::vector<float>(back[0].data(), back[0].data() + 12) == std::vector<float>(whole.data(), whole.data() + 12));
  // more replicas than a unit's elements: some own nothing of it
  const strata::detail::ShardLayout M({2}, 4);
  CHECK(M.owned(0) + M.owned(1) + M.owned(2) + M.owned(3) == 2);
}

TEST_CASE("ZeRO 2 and 3 give stage 0's weights, optimizer state, evaluation and predictions bit for bit") {
  strata_test::Watchdog dog("fully sharded bitwise", 120s);
  for (int p : {2, 3, 5}) {  // 5 replicas: more than the cores, and than some slices' elements
    CAPTURE(p);
    const Trained zero0 = train(p, ShardedUpdate::Off);
    REQUIRE(zero0.state.size() == 2);  // Adam's moments
    for (ShardedUpdate mode : {ShardedUpdate::On, ShardedUpdate::Gradients, ShardedUpdate::Parameters}) {
      CAPTURE(static_cast<int>(mode));
      check_same(train(p, mode), zero0);
    }
  }
  CHECK(train(2, ShardedUpdate::Parameters, 1).choice.find("ZeRO stage 3") != std::string::npos);
  CHECK(train(2, ShardedUpdate::Gradients, 1).choice.find("ZeRO stage 2") != std::string::npos);
  // one replica: nothing to shard, the plain executor
  CHECK(train(1, ShardedUpdate::Parameters, 1).weights == train(1, ShardedUpdate::Off, 1).weights);
}

TEST_CASE("ZeRO buckets: whole layers from the end, each replica's slices packed to its block and back") {
  const strata::detail::ShardLayout L({5, 0, 3, 4}, 3);  // units [0,5) [5,8) [8,12)
  // 20 bytes: the last two units (12 + 16 bytes: the first bucket needs 20), then the first (20 bytes)
  const strata::detail::ShardBuckets bk(L, 20);
  REQUIRE(bk.buckets().size() == 2);
  CHECK(bk.buckets()[0].ua == 1);
  CHECK(bk.buckets()[0].ub == 3);
  CHECK(bk.buckets()[1].ua == 0);
  CHECK(bk.buckets()[1].ub == 1);
  CHECK(bk.of_unit(2) == 0);
  CHECK(bk.of_unit(0) == 1);
  // bucket 0: replica 0 owns 1 of unit 1 and 2 of unit 2 (3), replicas 1 and 2 own 1 + 1: blocks of 3
  CHECK(bk.buckets()[0].block == 3);
  CHECK(bk.buckets()[1].block == 2);  // 5 over 3: 2, 2, 1
  CHECK(bk.largest_block() == 3);
  CHECK(bk.buffer_floats(3) == 2 * 4 * 3);
  std::vector<float> flat(12);
  for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(i);
  std::vector<float> buf(9, -1.f);
  auto& m = strata::kernels::host_memory();
  bk.pack(m, L, 2, flat.data() + 8, buf.data());  // backward's order: unit 2, then unit 1
  bk.pack(m, L, 1, flat.data() + 5, buf.data());
  // replica q's block: its slice of unit 1, then of unit 2 (its owned order), then padding
  CHECK(buf == std::vector<float>{5, 8, 9, 6, 10, -1, 7, 11, -1});
  std::vector<float> back(12, 0.f);
  bk.unpack(m, L, 0, buf.data(), back.data());
  CHECK(back == std::vector<float>{0, 0, 0, 0, 0, 5, 6, 7, 8, 9, 10, 11});
  CHECK_FALSE(strata::detail::ShardBuckets(L, 0).on());
  CHECK(strata::detail::ShardBuckets(L, 1).buckets().size() == 3);  // a bucket a unit
}

TEST_CASE("ZeRO 2 and 3 by buckets: the per-layer (and stage 0) bits, the summary says so") {
  strata_test::Watchdog dog("fully sharded buckets", 180s);
  for (int p : {2, 3}) {
    CAPTURE(p);
    const Trained zero0 = train(p, ShardedUpdate::Off, 2);
    for (ShardedUpdate mode : {ShardedUpdate::Gradients, ShardedUpdate::Parameters})
      for (std::size_t bytes : {std::size_t{1}, std::size_t{400}, std::size_t{1} << 20}) {
        CAPTURE(static_cast<int>(mode));
        CAPTURE(bytes);
        const Trained t = train(p, mode, 2, false, bytes);
        check_same(t, zero0);
        // layers of 112 | 136 | 99 | 33 floats: 1 byte a bucket each; 400 bytes {99 33} {136} {112}; 1 MiB one
        const std::string n = bytes == 1 ? "4 buckets" : bytes == 400 ? "3 buckets" : "1 bucket";
        CHECK_MESSAGE(t.choice.find("reduce-scattered in " + n + " of whole layers") != std::string::npos, t.choice);
        if (mode == ShardedUpdate::Gradients)
          CHECK(t.choice.find("all-gathered into every copy by the same buckets") != std::string::npos);
      }
  }
  // compression keeps each layer's 16-bit reduce-scatter, and says why
  const Trained c = train(2, ShardedUpdate::Gradients, 1, false, 400, strata::Compression::BF16);
  CHECK_MESSAGE(c.choice.find("not by buckets (they apply without compression)") != std::string::npos, c.choice);
  CHECK(c.choice.find("each layer's gradient reduce-scattered as backward finishes it") != std::string::npos);
}

TEST_CASE("GPU replicas at ZeRO 2 and 3 by buckets (on the host's compute): the CPU replicas' bits") {
  strata_test::Watchdog dog("fully sharded GPU buckets", 120s);
  strata_test::HostAsGpu host;
  for (ShardedUpdate mode : {ShardedUpdate::Gradients, ShardedUpdate::Parameters}) {
    CAPTURE(static_cast<int>(mode));
    const Trained cpu = train(3, mode, 2);
    const Trained gpu = train(3, mode, 2, true, 400);
    check_same(gpu, cpu);
    CHECK(gpu.choice.find("reduce-scattered in 3 buckets of whole layers") != std::string::npos);
  }
}

std::atomic<std::uint64_t> seen_started{0};  // buckets this replica's thread started before the probe's backward
//! The identity; in backward, the ZeRO buckets its thread started since its forward (the later layers').
class BucketProbe final : public strata_test::Identity<BucketProbe> {
 public:
  [[nodiscard]] std::string kind() const override { return "BucketProbe"; }
  void on_forward(const nn::RunInfo& /*info*/) { at_ = strata::detail::buckets_started_here(); }
  void on_backward() {
    const std::uint64_t n = strata::detail::buckets_started_here() - at_;
    for (std::uint64_t cur = seen_started.load(); n > cur && !seen_started.compare_exchange_weak(cur, n);) {
    }
  }

 private:
  std::uint64_t at_ = 0;
};

TEST_CASE("ZeRO 2's buckets start during backward: the later layers' reduce-scatters under way before the earlier layers' backward") {
  strata_test::Watchdog dog("fully sharded buckets overlap", 60s);
  auto run = [](std::size_t bytes) {
    seen_started = 0;
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    s.executor_options().sharded_update = ShardedUpdate::Gradients;
    s.executor_options().bucket_bytes = bytes;
    const auto data = strata_test::blobs(40, 11);
    auto m = s.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16}, BucketProbe{}, nn::Dense{8}, nn::Dense{3}};
    });
    m.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
    m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(10)),
          {.epochs = 1, .verbose = nn::Verbosity::Silent});
    return seen_started.load();
  };
  CHECK(run(1) == 2);        // a bucket a layer: the two layers after the probe started before its backward
  CHECK(run(1 << 20) == 0);  // one bucket: it starts after the first layer's backward
  CHECK(run(0) == 0);        // a reduce-scatter a layer, not buckets
}

TEST_CASE("ZeRO 3 gathers each layer's values while the layer before it (forward) or after it (backward) computes") {
  strata_test::Watchdog dog("fully sharded prefetch", 60s);
  auto& counts = strata::detail::gather_counts();
  counts.prefetched = 0;
  counts.on_demand = 0;
  // 90 rows in batches of 10: 9 steps over 3 replicas; four layers with parameters: per step and replica, the
  // first forward and the first backward gather on demand, the other three of each were prefetched
  train(3, ShardedUpdate::Parameters, 1);
  const std::uint64_t steps = 9 * 3;
  const std::uint64_t evaluated = 6 * 3, predicted = 13 * 3;  // 90 rows in 16s, then in 7s: forward only
  CHECK(counts.on_demand.load() == 2 * steps + evaluated + predicted);
  CHECK(counts.prefetched.load() == 6 * steps + 3 * (evaluated + predicted));
}

TEST_CASE("ZeRO 3 by buckets gathers a bucket's layers at once, the next bucket's while this one computes") {
  strata_test::Watchdog dog("fully sharded bucket prefetch", 60s);
  auto& counts = strata::detail::gather_counts();
  counts.prefetched = 0;
  counts.on_demand = 0;
  // 400 bytes: buckets {dense_2, dense_3} {dense_1} {dense}; per training step and replica forward gathers the
  // first bucket on demand and prefetches the other two, backward starts on forward's last bucket (still
  // gathered) and prefetches the other two; evaluation and prediction: forward only
  const Trained t = train(3, ShardedUpdate::Parameters, 1, false, 400);
  CHECK(t.choice.find("a bucket's layers' values all-gathered before the first one's forward") != std::string::npos);
  const std::uint64_t steps = 9 * 3;
  const std::uint64_t evaluated = 6 * 3, predicted = 13 * 3;
  CHECK(counts.on_demand.load() == steps + evaluated + predicted);
  CHECK(counts.prefetched.load() == 4 * steps + 2 * (evaluated + predicted));
}

TEST_CASE("a checkpoint of ZeRO 3 resumes at ZeRO 0 and other replica counts, bit for bit") {
  strata_test::Watchdog dog("fully sharded checkpoint", 60s);
  const auto path = std::filesystem::temp_directory_path() /
                    ("strata_fully_sharded_resume_" + std::to_string(::getpid()) + ".ckpt");
  auto run = [&](int p, ShardedUpdate mode, bool save, bool load) {
    strata::MirroredStrategy s{strata::cpu_replicas(p)};
    s.executor_options().sharded_update = mode;
    return strata_test::epoch_saved_epoch(s, model, path, save, load);
  };
  const auto straight = run(3, ShardedUpdate::Parameters, true, false);  // epoch 1, saved, epoch 2
  CHECK(run(3, ShardedUpdate::Off, false, true) == straight);
  CHECK(run(3, ShardedUpdate::Gradients, false, true) == straight);
  // 2 replicas split the batches' rows otherwise: not the same sums' order, but the state loads and trains
  const auto two = run(2, ShardedUpdate::Parameters, false, true);
  CHECK(two.size() == straight.size());
  std::filesystem::remove(path);
}

TEST_CASE("the model state per replica: ZeRO 3 at most 1/p of ZeRO 0's plus the largest layer's") {
  using strata::detail::model_state_bytes;
  const std::size_t slots = 2;  // Adam's
  // the wide MLP (784-2048-2048-10): one layer holds 72% of it; a window pair holds it and the next largest
  const strata::detail::ShardLayout wide({784 * 2048 + 2048, 2048 * 2048 + 2048, 2048 * 10 + 10}, 4);
  const std::size_t n = wide.params(), largest = wide.largest(), pair = wide.window_pair();
  CHECK(n == 5'824'522);
  CHECK(pair == 2048 * 2048 + 2048 + 784 * 2048 + 2048);
  for (std::size_t p : {2, 4, 8}) {
    CAPTURE(p);
    const std::size_t z0 = model_state_bytes(0, n, p, slots, pair), z3 = model_state_bytes(3, n, p, slots, pair);
    CHECK(z0 == 4 * n * 4);  // values, gradient, two slots
    // 1/p (rounded up), plus a value and a gradient window pair: within the largest layer's values, gradient and
    // two slots
    CHECK(z3 <= z0 / p + (2 + slots) * largest * 4 + (2 + slots) * 4);
    if (p >= 4) CHECK(z3 < z0);
    // twenty equal layers: each stage holds less than the one before
    const std::size_t m = 20 * 50'000, two = 2 * 50'000;
    CHECK(model_state_bytes(1, m, p, slots, two) < model_state_bytes(0, m, p, slots, two));
    CHECK(model_state_bytes(2, m, p, slots, two) < model_state_bytes(1, m, p, slots, two));
    CHECK(model_state_bytes(3, m, p, slots, two) < model_state_bytes(2, m, p, slots, two));
  }
}

TEST_CASE("a memory budget the unsharded state exceeds: stage 0 fails fast naming the stage that fits; stage 3 trains") {
  strata_test::Watchdog dog("fully sharded budget", 60s);
  // the model's 383 parameters (its largest layers 136 and 112: a window pair of 248) under Adam at 4 replicas:
  // per replica, stage 0 holds 6128 bytes, stage 1 4216, stage 2 3676, stage 3 3520
  const auto data = strata_test::blobs(40, 2);
  auto fit = [&](ShardedUpdate mode, strata::Compression c = strata::Compression::None) {
    strata::MirroredStrategy s{strata::cpu_replicas(4)};
    s.executor_options().sharded_update = mode;
    s.executor_options().compression = c;
    s.executor_options().memory_budget_bytes = 3600;
    auto m = s.scope(model);
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    return m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(8)),
                 {.epochs = 1, .verbose = nn::Verbosity::Silent});
  };
  CHECK_THROWS_WITH_AS(fit(ShardedUpdate::Off), doctest::Contains("ZeRO stage 3 would fit"), strata::Error);
  CHECK_THROWS_WITH_AS(fit(ShardedUpdate::On), doctest::Contains("memory_budget_bytes is 3600"), strata::Error);
  CHECK(fit(ShardedUpdate::Parameters).at("loss").size() == 1);
  // compression's error feedback adds its residual of the whole gradient (383 floats) and 16-bit windows and
  // slice (248 + 96 halves): 5740 bytes, over the budget, said
  CHECK_THROWS_WITH_AS(fit(ShardedUpdate::Parameters, strata::Compression::BF16),
                       doctest::Contains("is 5740 bytes (383 parameters: values, gradient, 2 optimizer slots, the "
                                         "compression's residual) but ExecutorOptions::memory_budget_bytes is 3600"),
                       strata::Error);
}

TEST_CASE("GPU replicas at ZeRO 2 and 3 (on the host's compute): the CPU replicas' bits, through device collectives") {
  strata_test::Watchdog dog("fully sharded GPU replicas", 120s);
  strata_test::HostAsGpu host;  // every gpu(i) computes on a stand-in; its collectives the device team's
  for (int p : {2, 3}) {
    CAPTURE(p);
    for (ShardedUpdate mode : {ShardedUpdate::Gradients, ShardedUpdate::Parameters}) {
      CAPTURE(static_cast<int>(mode));
      const Trained cpu = train(p, mode, 2);
      const Trained gpu = train(p, mode, 2, true);
      check_same(gpu, cpu);
      CHECK(gpu.choice.find("; on the GPUs: stand-in GPUs in host memory: " + std::to_string(p) +
                            " replicas share GPU 0 (virtual GPUs): a direct reduce kernel") != std::string::npos);
    }
  }
}

TEST_CASE("a replica failing while the others wait in a parameter gather is named within the deadline") {
  strata_test::Watchdog dog("fully sharded failure", 60s);
  strata_test::HostAsGpu host;  // the GPU replicas' case on the host's compute
  for (bool gpus : {false, true}) {
    CAPTURE(gpus);
    strata::CommOptions opts;
    opts.timeout = 5s;
    strata::MirroredStrategy s{gpus ? strata::virtual_gpus(0, 3) : strata::cpu_replicas(3), opts};
    s.executor_options().sharded_update = ShardedUpdate::Parameters;
    const auto data = strata_test::blobs(48, 3);
    auto m = s.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16}, FailsOn{1, 2}, nn::Dense{8}, nn::Dense{3}};
    });
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(12)),
                               {.epochs = 1, .verbose = nn::Verbosity::Silent}),
                         doctest::Contains("replica 1 fails in forward"), strata::ReplicaError);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // released by the abort, not by the timeout
    // the executor starts clean afterwards: evaluation gathers every layer again
    CHECK(m.evaluate(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(12))).contains("loss"));
  }
}

TEST_CASE("what ZeRO 2 and 3 refuse, with the reason") {
  const auto data = strata_test::blobs(20, 2);
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  s.executor_options().sharded_update = ShardedUpdate::Gradients;
  auto m = s.scope(model);
  m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  // a custom loop's gradient hook: the whole gradient never exists
  nn::GradientHook clip = [](strata::ReplicaGradient&) {};
  bool refused = false;
  for (const auto& b : s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(10))) {
    CHECK_THROWS_WITH_AS(m.train_step(b, clip), doctest::Contains("never hold"), strata::Error);
    refused = true;
    break;
  }
  CHECK(refused);
  // what only the mirrored executors read, set on another strategy: said, not ignored
  strata::CentralStorageStrategy central{strata::cpu_replicas(2)};
  central.executor_options().sharded_update = ShardedUpdate::Parameters;
  CHECK_THROWS_WITH_AS((void)central.scope(model), doctest::Contains("ZeRO stages 2 and 3 shard MirroredStrategy"),
                       strata::Error);
  central.executor_options().sharded_update = ShardedUpdate::Auto;
  central.executor_options().compression = strata::Compression::FP16;
  CHECK_THROWS_WITH_AS((void)central.scope(model), doctest::Contains("leave compression at None"), strata::Error);
}

}  // namespace fully_sharded_test
