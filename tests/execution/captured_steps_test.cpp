// Issue 22: a GPU step that a CUDA graph can capture, built and tested
// without a GPU. ExecutorOptions::capture_steps captures a one-device
// step once per batch size and replays it (execution/captured_steps.hpp);
// on the host-as-GPU compute the capture is a kernels::RecordingCompute,
// which records each call with the values it was given and refuses what a
// CUDA capture refuses. A step that took anything varying by value (the
// rate, the iteration keying dropout, 1 / rows) would replay a stale value
// and the weights below would differ from the eager run's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/kernels/recording_compute.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"

namespace captured_steps_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using strata::Tensor;
using strata_test::Blobs;
using strata_test::blobs;

namespace {

nn::Sequential dropout_mlp() {
  return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::Dropout{0.25f}, nn::Dense{8}, nn::ReLU{}, nn::Dense{3}};
}

struct Run {
  std::vector<float> w;
  std::int64_t iterations = 0;
  nn::History history;
};

enum class Opt { AdamDecay, SgdNesterov };

//! dropout_mlp on gpu(0) (the host's compute in its place) fitted on
//! `data` in batches of `batch`, its steps captured or eager.
Run fit(const Blobs& data, std::size_t batch, bool capture, Opt opt, int epochs = 3, std::size_t read_every = 3,
        nn::FitOptions fo = {}) {
  strata::OneDeviceStrategy s{strata::gpu(0)};
  s.executor_options().capture_steps = capture;
  s.executor_options().read_every = read_every;
  auto model = s.scope(dropout_mlp);
  if (opt == Opt::AdamDecay)
    model.compile(nn::Adam{nn::ExponentialDecay{0.02f, 4, 0.7f}}, nn::SparseCategoricalCrossentropy{{.from_logits = true}},
                  {nn::Accuracy{}}, {.seed = 11});
  else
    model.compile(nn::SGD{0.05, {.momentum = 0.9f, .nesterov = true}},
                  nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 11});
  fo.epochs = epochs;
  fo.verbose = nn::Verbosity::Silent;
  Run r;
  r.history = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(batch)), fo);
  r.w = strata_test::flat_weights(model);
  r.iterations = model.iterations();
  return r;
}

}  // namespace

TEST_CASE("captured steps replay the eager steps bit for bit: Adam with a schedule, SGD Nesterov, dropout, L2") {
  strata_test::HostAsGpu host;
  const Blobs data = blobs(100, 3);  // batches of 16: six full, then 4 rows (eager: another size)
  for (Opt opt : {Opt::AdamDecay, Opt::SgdNesterov}) {
    CAPTURE(static_cast<int>(opt));
    const Run eager = fit(data, 16, false, opt);
    for (std::size_t every : {std::size_t{1}, std::size_t{3}, std::size_t{100}}) {
      CAPTURE(every);
      const Run got = fit(data, 16, true, opt, 3, every);
      CHECK(got.iterations == eager.iterations);
      CHECK(got.w == eager.w);  // bitwise
      REQUIRE(got.history.epochs().size() == 3);
      for (std::size_t e = 0; e < 3; ++e) {
        // the same per-example sums, added in another grouping (per read, not per step)
        CHECK(got.history.epochs()[e].at("loss") == doctest::Approx(eager.history.epochs()[e].at("loss")).epsilon(1e-12));
        CHECK(got.history.epochs()[e].at("accuracy") == eager.history.epochs()[e].at("accuracy"));
      }
    }
  }
  // one batch size only (every step after the first two replayed), and a batch of the whole data (one step a pass)
  for (std::size_t batch : {std::size_t{20}, std::size_t{100}}) {
    CAPTURE(batch);
    CHECK(fit(data, batch, true, Opt::AdamDecay).w == fit(data, batch, false, Opt::AdamDecay).w);
  }
}

TEST_CASE("a captured step skips a non-finite gradient on the device, as the eager step does") {
  strata_test::HostAsGpu host;
  Blobs spoiled = blobs(96, 3);
  spoiled.x[(2 * 16 + 5) * 6 + 1] = std::numeric_limits<float>::quiet_NaN();  // batch 2 of 6
  const Run eager = fit(spoiled, 16, false, Opt::AdamDecay, 2);
  const Run got = fit(spoiled, 16, true, Opt::AdamDecay, 2, 4);
  CHECK(eager.iterations == 10);  // 2 epochs of 5 good steps
  CHECK(got.iterations == eager.iterations);
  CHECK(got.w == eager.w);
  for (float v : got.w) REQUIRE(std::isfinite(v));
  for (const auto& e : got.history.epochs()) CHECK(e.at("skipped_steps") == 1.0);
  // max_bad_steps reached: raised at the read, naming the run
  Blobs all_bad = blobs(64, 3);
  for (std::size_t r = 0; r < 64; r += 16) all_bad.x[r * 6] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(fit(all_bad, 16, true, Opt::AdamDecay, 2, 2, {.max_bad_steps = 3}),
                       doctest::Contains("in a row"), strata::NonFiniteError);
}

TEST_CASE("a label that is no class index stops a captured run; the model trains afterwards") {
  strata_test::HostAsGpu host;
  Blobs data = blobs(64, 3);
  data.y[40] = 99;
  strata::OneDeviceStrategy s{strata::gpu(0)};
  s.executor_options().capture_steps = true;
  auto model = s.scope(dropout_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  CHECK_THROWS_WITH_AS(model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
                                 {.epochs = 1, .verbose = nn::Verbosity::Silent}),
                       doctest::Contains("99"), strata::Error);
  const Blobs clean = blobs(64, 4);
  CHECK_NOTHROW(model.fit(s.distribute(strata::data::from_tensor_slices(clean.x, clean.y).batch(16)),
                          {.epochs = 2, .verbose = nn::Verbosity::Silent}));
  for (float v : strata_test::flat_weights(model)) REQUIRE(std::isfinite(v));
}

TEST_CASE("capture_steps is refused where steps are not captured, and a custom loop's hook is refused") {
  const Blobs data = blobs(32, 3);
  {
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    s.executor_options().capture_steps = true;
    CHECK_THROWS_WITH_AS(s.scope(dropout_mlp), doctest::Contains("OneDeviceStrategy on a GPU"), strata::Error);
  }
  {
    strata::OneDeviceStrategy s{strata::cpu(0)};
    s.executor_options().capture_steps = true;
    CHECK_THROWS_WITH_AS(s.scope(dropout_mlp), doctest::Contains("capture_steps"), strata::Error);
  }
  {
    strata_test::HostAsGpu host;
    strata::OneDeviceStrategy s{strata::gpu(0)};
    s.executor_options().capture_steps = true;
    s.executor_options().read_every = 0;
    CHECK_THROWS_WITH_AS(s.scope(dropout_mlp), doctest::Contains("read_every"), strata::Error);
  }
  strata_test::HostAsGpu host;
  strata::OneDeviceStrategy s{strata::gpu(0)};
  s.executor_options().capture_steps = true;
  auto model = s.scope(dropout_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  auto batches = s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16));
  for (const auto& b : batches) {
    CHECK_THROWS_WITH_AS(model.train_step(b, [](strata::ReplicaGradient&) {}), doctest::Contains("hook"),
                         strata::Error);
    break;
  }
}

TEST_CASE("RecordingCompute records values as a CUDA graph does, and refuses what a capture cannot hold") {
  strata::kernels::RecordingCompute rec{strata::kernels::host_compute()};
  Tensor<float> x{{64}}, y{{64}}, mask{{64}}, y_at{{64}}, mask_at{{64}};
  for (std::size_t i = 0; i < 64; ++i) x[i] = 1.f + static_cast<float>(i);
  strata::kernels::StepCounters counters;
  std::uint64_t key = 5;
  rec.begin_step_capture();
  rec.dropout(x.data(), y.data(), mask.data(), 64, key, 0.5f);  // the key by value: baked in
  rec.dropout_at(x.data(), y_at.data(), mask_at.data(), 64, 5, 0, 0, &counters, 0.5f);  // read at each launch
  rec.end_step(&counters, true);
  CHECK(y[0] == 0.f);  // recorded, not run
  CHECK_THROWS_WITH_AS(rec.upload(y.data(), x.data(), 4), doctest::Contains("may not upload"), strata::Error);
  CHECK_THROWS_WITH_AS(rec.download(y.data(), x.data(), 4), doctest::Contains("may not download"), strata::Error);
  CHECK_THROWS_WITH_AS(rec.synchronize(), doctest::Contains("may not synchronize"), strata::Error);
  CHECK_THROWS_WITH_AS((void)rec.allocate(16), doctest::Contains("may not allocate"), strata::Error);
  auto graph = rec.end_step_capture();
  std::vector<std::vector<float>> by_value, at;
  for (int i = 0; i < 3; ++i) {
    key = 100 + static_cast<std::uint64_t>(i);  // too late for the capture
    graph->launch();
    by_value.emplace_back(mask.begin(), mask.end());
    at.emplace_back(mask_at.begin(), mask_at.end());
  }
  CHECK(counters.iteration == 3);
  CHECK(by_value[0] == by_value[2]);  // a scalar passed by value replays stale
  CHECK(at[0] != at[1]);              // the iteration in memory gives a new mask each step
  // each replayed mask is the eager one of its iteration
  for (std::uint64_t it = 0; it < 3; ++it) {
    Tensor<float> ey{{64}}, em{{64}};
    strata::kernels::host_compute().dropout(x.data(), ey.data(), em.data(), 64,
                                            strata::detail::mix(std::uint64_t{5}, it, std::uint64_t{0}, std::uint64_t{0}),
                                            0.5f);
    CHECK(at[it] == std::vector<float>(em.begin(), em.end()));
  }
}

}  // namespace captured_steps_test
