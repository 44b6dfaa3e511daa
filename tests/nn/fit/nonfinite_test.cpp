// Issue 15, "lose nothing": non-finite values are never hidden. NaN flows
// through every op (tests/nn/layers_test, optim_losses_test, conv_layers_test
// check the ops); fit's gradient finiteness policy (FitOptions::check_finite,
// on by default) skips a step whose reduced gradient holds a NaN or an
// infinity on every replica, counts it in the logs, and stops after
// max_bad_steps in a row with NonFiniteError naming the step; fit and
// evaluate refuse a dataset that gives no batches.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "strategy/strategy_sweep.hpp"
#include "support/watchdog.hpp"

namespace nonfinite_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::Tensor;
using strata_test::Blobs;
using strata_test::blobs;

namespace {

constexpr float nan_v = std::numeric_limits<float>::quiet_NaN();

//! `data` without rows [first, last).
Blobs without(const Blobs& data, std::size_t first, std::size_t last) {
  const std::size_t n = data.x.shape()[0], kept = n - (last - first);
  Blobs out{Tensor<float>{{kept, 6}}, Tensor<std::int32_t>{{kept}}};
  std::size_t o = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i >= first && i < last) continue;
    for (std::size_t j = 0; j < 6; ++j) out.x[o * 6 + j] = data.x[i * 6 + j];
    out.y[o++] = data.y[i];
  }
  return out;
}

struct Fit {
  std::vector<float> w;
  nn::History history;
  std::int64_t iterations = 0;
  double eval_loss = 0;  // on clean data, every replica with its own copy: copies that diverged would show
};

template <class S>
Fit fit(S& s, const Blobs& data, nn::FitOptions opts = {}) {
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 7});
  opts.verbose = nn::Verbosity::Silent;
  Fit f;
  f.history = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)), opts);
  f.w = strata_test::flat_weights(model);
  f.iterations = model.iterations();
  const Blobs clean = blobs(48, 9);
  f.eval_loss = model.evaluate(s.distribute(strata::data::from_tensor_slices(clean.x, clean.y).batch(48))).at("loss");
  return f;
}

// 64 rows in batches of 16; a NaN (or an infinity) in row `row` spoils batch row / 16 only.
template <class S>
void check_skips_bad_batch(S& s, std::size_t row, float bad_value) {
  const Blobs data = blobs(64, 3);
  Blobs spoiled = data;
  spoiled.x[row * 6 + 2] = bad_value;
  const std::size_t batch = row / 16;
  const Fit ref = fit(s, without(data, batch * 16, batch * 16 + 16), {.epochs = 2});
  const Fit got = fit(s, spoiled, {.epochs = 2});
  CHECK(got.iterations == 6);  // 2 epochs of 3 good steps: the bad ones do not advance the optimizer
  CHECK(got.w == ref.w);       // bitwise: Adam never saw the bad batch, as if it had not been there
  CHECK(got.eval_loss == ref.eval_loss);
  for (float v : got.w) REQUIRE(std::isfinite(v));
  REQUIRE(got.history.epochs().size() == 2);
  for (const auto& e : got.history.epochs()) {
    CHECK(e.at("skipped_steps") == 1.0);
    // a NaN input's NaN loss is shown, not hidden (an infinite input may leave the loss finite: tanh(inf) = 1)
    if (std::isnan(bad_value)) CHECK(std::isnan(e.at("loss")));
  }
  CHECK_FALSE(ref.history.epochs()[0].contains("skipped_steps"));  // absent when nothing was skipped
}

}  // namespace

TEST_CASE("fit skips a step whose gradient is not finite, under every strategy and backend: as if the batch had not been there") {
  strata_test::Watchdog dog("skip a bad step", 300s);
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true}, [](auto& s, const strata::StrategyInfo&, strata_test::Backend) {
        // every replica skips, whichever replica's rows (a pipeline: micro-batch) hold the bad value
        check_skips_bad_batch(s, 16 + 15, nan_v);  // the last row of batch 1: the last replica's rows only
        check_skips_bad_batch(s, 32, std::numeric_limits<float>::infinity());  // the first of batch 2: replica 0's
      });
  // minus infinity, in the last batch's last row
  check_skips_bad_batch(strata::get_strategy(), 63, -std::numeric_limits<float>::infinity());
}

// What the sweep's 2 replicas do not reach: the sharded update (3 replicas,
// or asked for with 2), 3 GPU replicas on one GPU, one and 3 replicas
// computing over central storage.
TEST_CASE("under MirroredStrategy a NaN in one replica's rows makes every replica skip (sharded, 3 replicas)") {
  strata_test::Watchdog dog("mirrored skip", 300s);
  for (int p : {2, 3}) {
    for (auto mode : {strata::ShardedUpdate::Off, strata::ShardedUpdate::On}) {
      if (p == 2 && mode == strata::ShardedUpdate::Off) continue;  // the sweep's
      CAPTURE(p);
      CAPTURE(static_cast<int>(mode));
      strata::MirroredStrategy s{strata::cpu_replicas(p)};
      s.executor_options().sharded_update = mode;
      check_skips_bad_batch(s, 16 + 15, nan_v);  // the last row of batch 1: the last replica's rows only
      check_skips_bad_batch(s, 32, nan_v);       // the first row of batch 2: replica 0's
    }
  }
}

TEST_CASE("under MirroredStrategy on 3 GPU replicas of one GPU (their executor, on the host compute) every replica skips too") {
  strata_test::Watchdog dog("mirrored gpu skip", 300s);
  strata_test::HostAsGpu host;
  strata::MirroredStrategy s{strata::virtual_gpus(0, 3)};
  check_skips_bad_batch(s, 16 + 15, nan_v);  // the last replica's rows only
  check_skips_bad_batch(s, 32, std::numeric_limits<float>::infinity());  // replica 0's
}

TEST_CASE("under CentralStorageStrategy of 1 and 3 replicas every replica skips too") {
  strata_test::Watchdog dog("central storage skip", 300s);
  for (int p : {1, 3}) {
    CAPTURE(p);
    strata::CentralStorageStrategy s{strata::cpu_replicas(p)};
    check_skips_bad_batch(s, 16 + 15, nan_v);
  }
}

// Issue 22: a replica whose step fails (here: a label that is no class
// index in replica 1's rows) releases the other GPU replicas at once, as CPU
// replicas are released, instead of leaving them in the device collectives
// until the deadline (5.00 s before the executors became one).
TEST_CASE("a GPU replica that fails in its step releases the others at once (on the host compute)") {
  strata_test::Watchdog dog("gpu replica failure", 60s);
  Blobs data = blobs(64, 3);
  data.y[16 + 12] = 99;  // batch 1, replica 1's rows (8 .. 15 of the batch)
  for (const bool gpus : {false, true}) {
    CAPTURE(gpus);
    std::optional<strata_test::HostAsGpu> host;
    if (gpus) host.emplace();
    strata::MirroredStrategy s{gpus ? strata::virtual_gpus(0, 2) : strata::cpu_replicas(2),
                               strata::CommOptions{.timeout = 5s}};
    auto model = s.scope(strata_test::blobs_mlp);
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
    const auto started = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
                                   {.epochs = 1, .verbose = nn::Verbosity::Silent}),
                         doctest::Contains("99"), strata::Error);
    CHECK(std::chrono::steady_clock::now() - started < 2s);  // the deadline is 5 s
    // nothing is left half done: the same model trains on clean data afterwards
    const Blobs clean = blobs(64, 3);
    CHECK_NOTHROW(model.fit(s.distribute(strata::data::from_tensor_slices(clean.x, clean.y).batch(16)),
                            {.epochs = 1, .verbose = nn::Verbosity::Silent}));
  }
}

namespace {
//! The host's compute, counting what is read back from its "device" memory.
struct CountingCompute : strata::kernels::HostCompute {
  std::atomic<std::size_t>* large;  // reads of at least `threshold` bytes
  std::size_t threshold;
  CountingCompute(std::atomic<std::size_t>* l, std::size_t t) : large(l), threshold(t) {}
  void download(void* dst, const void* src, std::size_t bytes) override {
    if (bytes >= threshold) ++*large;
    HostCompute::download(dst, src, bytes);
  }
};
struct EveryBatch : nn::Callback {
  int batches = 0;
  void on_batch_end(int, const nn::Logs& logs) override { batches += logs.contains("loss") ? 1 : 0; }
};
}  // namespace

// Issue 22: the running logs (the progress line, callbacks' on_batch_end)
// read the variables back from a GPU only for a regularized model's L2 term;
// before, every step downloaded every parameter.
TEST_CASE("the running logs read the variables back only for an L2 term (GPU replicas, on the host compute)") {
  strata_test::Watchdog dog("logs without downloads", 60s);
  static std::atomic<std::size_t> large{0};
  const Blobs data = blobs(64, 3);
  std::size_t reads[2] = {0, 0};  // without, with L2
  for (const bool l2 : {false, true}) {
    CAPTURE(l2);
    strata_test::HostAsGpu host;
    strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
      return std::make_unique<CountingCompute>(&large, 6 * 16 * sizeof(float));  // the first kernel alone
    };
    strata::MirroredStrategy s{strata::virtual_gpus(0, 1)};
    auto model = s.scope([&] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = l2 ? 1e-3f : 0.f}},
                            nn::Dense{3}};
    });
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
    EveryBatch cb;
    large = 0;
    model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent, .callbacks = {&cb}});
    CHECK(cb.batches == 4);
    reads[l2] = large;
  }
  // the same steps (the host-staged sum reads each gradient back alike); the
  // L2 term needs the values after each of the 4 steps, nothing else does
  CHECK(reads[1] >= reads[0] + 4);
}

TEST_CASE("max_bad_steps consecutive bad steps stop fit with NonFiniteError naming the step") {
  strata_test::Watchdog dog("stop after bad steps", 120s);
  Blobs data = blobs(96, 4);  // 6 batches of 16
  for (std::size_t b : {1u, 3u, 4u, 5u}) data.x[(b * 16 + 2) * 6] = nan_v;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  std::size_t step = 0;
  std::string what;
  try {
    fit(s, data, {.epochs = 2, .max_bad_steps = 3});
  } catch (const strata::NonFiniteError& e) {
    step = e.step();
    what = e.what();
  }
  CHECK(step == 5);  // steps 3, 4, 5 in a row; step 1 alone did not stop it
  CHECK(what.find("epoch 1/2") != std::string::npos);
  CHECK(what.find("step 5 (optimizer iteration 2)") != std::string::npos);
  CHECK(what.find("check_finite = false") != std::string::npos);
  // below the bar: fit goes on and counts; max_bad_steps = 0 never stops
  const Fit f = fit(s, data, {.epochs = 2, .max_bad_steps = 0});
  CHECK(f.history.at("skipped_steps") == std::vector<double>{4.0, 4.0});
  CHECK(f.iterations == 4);
  // a run of bad steps that crosses an epoch's end counts as one run: batch 3 of epoch 1, then batch 0 of epoch 2
  Blobs edge = blobs(64, 5);
  for (std::size_t b : {0u, 3u}) edge.x[(b * 16) * 6] = nan_v;
  CHECK_THROWS_WITH_AS(fit(s, edge, {.epochs = 2, .max_bad_steps = 2}), doctest::Contains("epoch 2/2: the reduced gradient of step 0"),
                       strata::NonFiniteError);
}

TEST_CASE("check_finite = false lets a NaN gradient reach the weights (the documented opt-out)") {
  Blobs data = blobs(64, 3);
  data.x[20 * 6] = nan_v;
  strata::OneDeviceStrategy one{strata::cpu(0)};
  const Fit f = fit(one, data, {.epochs = 1, .check_finite = false});
  CHECK(f.iterations == 4);
  CHECK_FALSE(f.history.epochs()[0].contains("skipped_steps"));
  std::size_t nans = 0;
  for (float v : f.w) nans += std::isnan(v);
  CHECK(nans > 0);
  CHECK(std::isnan(f.history.at("loss")[0]));
}

TEST_CASE("callbacks and the progress line see skipped_steps while the epoch runs") {
  Blobs data = blobs(64, 3);
  data.x[0] = nan_v;  // batch 0
  struct Seen : nn::Callback {
    std::vector<double> skipped;
    void on_batch_end(int, const nn::Logs& logs) override {
      skipped.push_back(logs.contains("skipped_steps") ? logs.at("skipped_steps") : 0.0);
    }
  } seen;
  strata::OneDeviceStrategy one{strata::cpu(0)};
  auto model = one.scope(strata_test::blobs_mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  std::FILE* out = std::tmpfile();
  model.fit(strata::data::from_tensor_slices(data.x, data.y).batch(16),
            {.verbose = nn::Verbosity::PerEpoch, .callbacks = {&seen}, .out = out});
  CHECK(seen.skipped == std::vector<double>{1, 1, 1, 1});
  std::rewind(out);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), out));
  std::fclose(out);
  CHECK(text.find("skipped_steps") != std::string::npos);
}

TEST_CASE("fit and evaluate on a dataset that gives no batches are errors, not a loss of 0") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}});
  const auto empty = strata::data::from_tensor_slices(Tensor<float>{{0, 6}}, Tensor<std::int32_t>{{0}}).batch(16);
  CHECK_THROWS_WITH_AS(model.fit(s.distribute(empty), {.verbose = nn::Verbosity::Silent}),
                       doctest::Contains("fit: the dataset gave no batches"), strata::Error);
  CHECK_THROWS_WITH_AS(model.evaluate(s.distribute(empty)), doctest::Contains("evaluate: the dataset gave no batches"),
                       strata::Error);
  const Blobs data = blobs(32, 1);
  const auto some = strata::data::from_tensor_slices(data.x, data.y).batch(16);
  CHECK_THROWS_WITH_AS(model.fit(some.skip(2), {.verbose = nn::Verbosity::Silent}),
                       doctest::Contains("no batches"), strata::Error);
  // the same model trains and evaluates once it has data
  CHECK(model.fit(s.distribute(some), {.verbose = nn::Verbosity::Silent}).epochs().size() == 1);
  CHECK(std::isfinite(model.evaluate(s.distribute(some)).at("loss")));
}

namespace {

// The gradient finiteness policy at the seam: a program of 100 parameters
// whose gradient is `scale` per row everywhere except its LAST element, the
// sum of the rows' x (NaN when a row's x is): the NaN lies only in the last
// replica's slice of the reduced gradient, never in replica 0's.
class Probe final : public strata::ModelProgram {
 public:
  static constexpr std::size_t n = 100;
  std::atomic<int> applies{0};

  struct Replica final : strata::ReplicaProgram {
    std::span<const float> w;
    std::span<float> g;
    void step(const strata::Batch& b, strata::Range rows, const strata::StepInfo& info,
              strata::ReplicaResult& out) override {
      out.rows = rows.size();
      out.metrics.assign(1, 0.0);
      // evaluating: the loss is the sum of this replica's copy (copies that diverged show)
      out.loss = 0;
      for (float v : w) out.loss += v;
      if (info.phase != strata::Phase::Train) return;
      std::fill(g.begin(), g.end(), static_cast<float>(rows.size()) * info.scale);
      float last = 0.f;
      for (std::size_t i = rows.begin; i < rows.end; ++i) last += (*b.x)[i];
      g[n - 1] = last * info.scale;
    }
  };
  struct Sgd final : strata::Updater {
    std::atomic<int>* applies;
    void apply(std::span<float> w, std::span<const float> g, std::size_t, std::int64_t) override {
      ++*applies;
      for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.5f * g[i];
    }
  };
  std::size_t num_params() const override { return n; }
  std::vector<strata::Shape> variable_shapes() const override { return {strata::Shape{n}}; }
  std::size_t output_width() const override { return 1; }
  std::size_t num_metrics() const override { return 1; }
  std::unique_ptr<strata::ReplicaProgram> make_replica(std::span<const float> v, std::span<float> g) override {
    auto r = std::make_unique<Replica>();
    r->w = v;
    r->g = g;
    return r;
  }
  //! On the stand-in device (host memory, reported as a GPU's: the executors take their GPU branches) the
  //! probe's host loops reach its buffers; a real GPU's they could not.
  std::unique_ptr<strata::ReplicaProgram> make_replica_on(strata::kernels::Compute& c, std::span<const float> v,
                                                          std::span<float> g) override {
    if (c.where() == strata::kernels::Where::Cuda) return ModelProgram::make_replica_on(c, v, g);  // refuses it
    return make_replica(v, g);
  }
  bool compiled() const override { return true; }
  std::unique_ptr<strata::Updater> make_updater_on(strata::kernels::Compute& c, std::size_t k) const override {
    if (c.where() == strata::kernels::Where::Cuda) return ModelProgram::make_updater_on(c, k);  // refuses it
    return make_updater(k);
  }
  std::unique_ptr<strata::Updater> make_updater(std::size_t) const override {
    auto u = std::make_unique<Sgd>();
    u->applies = const_cast<std::atomic<int>*>(&applies);
    return u;
  }
};

// Batches of 6 rows of x = 1, except the batches in `bad`, whose last row is NaN.
struct ProbePass final : strata::Pass {
  std::vector<bool> bad;
  strata::Tensor<float> x{{6, 1}}, y{{6}};
  std::size_t at = 0;
  std::optional<strata::Batch> next() override {
    if (at >= bad.size()) return std::nullopt;
    x.fill(1.f);
    if (bad[at++]) x[5] = std::numeric_limits<float>::quiet_NaN();
    return strata::Batch{&x, &y, nullptr};
  }
  strata::Batch empty() override { throw strata::Error("no empty shares in one process"); }
};

struct ProbeRun {
  std::vector<float> w;
  double copies_sum = 0;  // an evaluation pass's loss: the sum of every replica's copy
  std::int64_t iteration = 0;
  std::size_t skipped = 0;
  int applies = 0;
};

ProbeRun run_probe(strata::AnyStrategy& s, std::vector<bool> bad, bool check = true) {
  Probe m;
  auto ex = s.make_executor(m);
  strata::Tensor<float> init{{Probe::n}};
  init.fill(1.f);
  ex->place(init);
  ProbeRun r;
  strata::Pass::FiniteCheck finite{.max_bad_steps = 0};
  ProbePass train;
  train.bad = std::move(bad);
  train.iteration = &r.iteration;
  train.finite = check ? &finite : nullptr;
  ex->run_pass(train);
  ProbePass eval;
  eval.bad = {false};
  eval.phase = strata::Phase::Evaluate;
  eval.iteration = &r.iteration;
  r.copies_sum = ex->run_pass(eval).loss;
  const auto& v = ex->value();
  r.w.assign(v.data(), v.data() + v.size());
  r.skipped = finite.skipped;
  r.applies = m.applies.load();
  return r;
}

// The NaN lies in the last replica's rows and slice of the reduced gradient.
void skips_the_bad_step(strata::AnyStrategy& s) {
  const ProbeRun ref = run_probe(s, {false, false});
  const ProbeRun got = run_probe(s, {false, true, false});
  CHECK(got.skipped == 1);
  CHECK(got.iteration == 2);                // the skipped step does not advance the optimizer
  CHECK(got.w == ref.w);                    // bitwise: as if the bad batch had never come
  CHECK(got.copies_sum == ref.copies_sum);  // every replica's copy: none applied its part alone
  CHECK(got.applies == ref.applies);        // no updater ran in the skipped step
  CHECK(std::isfinite(got.w.back()));
  const ProbeRun off = run_probe(s, {false, true, false}, false);
  CHECK(off.skipped == 0);
  CHECK(off.iteration == 3);
  CHECK(std::isnan(off.w.back()));  // check_finite = false: the NaN reaches the variables
}

}  // namespace

TEST_CASE("a non-finite reduced gradient is skipped by every replica, decided once per step, on every strategy and backend") {
  strata_test::Watchdog dog("finiteness policy", 120s);
  // (a pipeline's stages need a model of layers, which the probe is not)
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true, .whole_model = true},
      [](auto& s, const strata::StrategyInfo&, strata_test::Backend) { skips_the_bad_step(s.any()); },
      strata_test::small_choice(3));
}

// The mirrored executor's modes (1 to 3 replicas, the sharded update on and
// off) and central storage of 1 to 3 replicas, on CPUs.
TEST_CASE("a non-finite reduced gradient is skipped by every replica, sharded update or not, 1 to 3 replicas") {
  strata_test::Watchdog dog("finiteness policy", 120s);
  for (int p : {1, 2, 3}) {
    for (auto mode : {strata::ShardedUpdate::Off, strata::ShardedUpdate::On}) {
      strata::MirroredStrategy s{strata::cpu_replicas(p)};
      s.executor_options().sharded_update = mode;
      INFO("mirrored, ", p, " replicas", mode == strata::ShardedUpdate::On ? ", sharded update" : "");
      skips_the_bad_step(s.any());
    }
    strata::CentralStorageStrategy c{strata::cpu_replicas(p)};
    INFO("central storage, ", p, " replicas");
    skips_the_bad_step(c.any());
  }
}

TEST_CASE("the one-device executor skips a non-finite step and stops after max_bad_steps in a row") {
  Probe m;
  strata::detail::DeviceExecutor ex(m, strata::kernels::host_compute());
  strata::Tensor<float> init{{Probe::n}};
  init.fill(1.f);
  ex.place(init);
  std::int64_t it = 0;
  strata::Pass::FiniteCheck finite{.max_bad_steps = 2};
  ProbePass pass;
  pass.bad = {false, true, false, true, true, false};
  pass.iteration = &it;
  pass.finite = &finite;
  std::size_t step = 99;
  try {
    ex.run_pass(pass);
  } catch (const strata::NonFiniteError& e) {
    step = e.step();
    CHECK(std::string(e.what()).find("step 4 (optimizer iteration 2)") != std::string::npos);
    CHECK(std::string(e.what()).find("max_bad_steps = 2") != std::string::npos);
  }
  CHECK(step == 4);        // steps 3 and 4 in a row; step 1 alone did not stop it
  CHECK(finite.skipped == 3);
  CHECK(it == 2);          // steps 0 and 2 applied
  CHECK(m.applies == 2);
  for (float v : ex.value()) CHECK(std::isfinite(v));
}

}  // namespace nonfinite_test
