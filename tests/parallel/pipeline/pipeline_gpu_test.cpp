// GPU pipeline stages (issue 22, "one execution layer"): PipelineStrategy
// on GPU devices runs the pipeline executor that CPU stages run
// (parallel/pipeline/pipeline_executor.hpp), each stage's variables, gradient,
// optimizer state and activations in its own compute's memory, activations
// crossing stages through host memory (host-staged). On the host's compute
// standing in for each GPU (tests/device/host_as_gpu.hpp) the GPU pipeline must give
// the CPU pipeline's bits: for 2 and 3 stages, GPipe and 1F1B, micro-batches
// that do not divide the batch, data x pipeline copies, evaluate and
// predict, a custom loop's gradient hook, and a checkpoint read by the CPU
// pipeline. A stage's error on GPU stages is raised at once and the model
// trains afterwards.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "support/watchdog.hpp"

namespace pipeline_gpu_test {

namespace nn = strata::nn;
using namespace std::chrono_literals;
using strata::Schedule;

namespace {

// 6 layers, two without parameters, one with L2 (as pipeline_test's).
nn::Sequential mlp() {
  return nn::Sequential{nn::Input{{6}},  nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::ReLU{},      nn::Dense{12},
                        nn::Dropout{0.2f}, nn::ReLU{},
                        nn::Dense{3}};
}

std::vector<strata::Device> cpus(int n) { return strata::cpu_replicas(n); }
std::vector<strata::Device> gpus(int n) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  return strata::gpus(ids);
}

struct Trained {
  std::vector<float> weights;
  std::vector<double> losses;
};

auto dataset(std::size_t batch) {
  static const auto data = strata_test::blobs(203, 11);
  return strata::data::from_tensor_slices(data.x, data.y).batch(batch);
}

nn::Sequential compiled(strata::PipelineStrategy& s) {
  auto model = s.scope(mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 5});
  return model;
}

// A pipeline of `devices` (stages x copies), trained `epochs` on batches of `batch`.
Trained train(const std::vector<strata::Device>& devices, strata::PipelineOptions o, std::size_t batch, int epochs,
              strata::Compression c = strata::Compression::None) {
  strata::PipelineStrategy s{devices};
  s.pipeline_options() = std::move(o);
  s.executor_options().compression = c;
  auto model = compiled(s);
  const auto h = model.fit(s.distribute(dataset(batch)), {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  Trained t{strata_test::flat_weights(model), {}};
  for (const auto& logs : h.epochs()) t.losses.push_back(logs.at("loss"));
  return t;
}

// The host's compute, counting the bytes it allocates (what a stage keeps in its "GPU's" memory).
std::atomic<std::size_t> allocated{0};
std::atomic<int> made{0};
struct CountingCompute : strata::kernels::HostCompute {
  void* allocate(std::size_t bytes) override {
    allocated += bytes;
    return HostCompute::allocate(bytes);
  }
};

}  // namespace

TEST_CASE("GPU stages on the host compute give the CPU pipeline's weights bitwise: 2 and 3 stages, GPipe and 1F1B") {
  strata_test::Watchdog dog("gpu pipeline bitwise", 120s);
  int runs = 0;
  for (int S : {2, 3})
    for (Schedule k : {Schedule::GPipe, Schedule::OneFOneB})
      for (std::size_t M : {1u, 3u}) {  // batches of 25 in 3 micro-batches, a last batch of 3 rows
        CAPTURE(S);
        CAPTURE(M);
        CAPTURE(strata::to_string(k));
        const strata::PipelineOptions o{.stages = {}, .micro_batches = M, .schedule = k};
        const Trained cpu = train(cpus(S), o, 25, 2);
        strata_test::HostAsGpu host;
        const Trained gpu = train(gpus(S), o, 25, 2);
        CHECK(gpu.weights == cpu.weights);
        CHECK(gpu.losses == cpu.losses);
        ++runs;
      }
  CHECK(runs == 8);
}

TEST_CASE("data x pipeline on GPU stages: 2 copies of 2 stages give the CPU run's bits (sums staged on the host)") {
  strata_test::Watchdog dog("gpu data x pipeline", 120s);
  for (std::size_t batch : {25u, 1u}) {  // with batches of 1 row, copy 1's share is empty
    CAPTURE(batch);
    const strata::PipelineOptions o{.stages = {}, .micro_batches = 2, .data_parallel = 2};
    const Trained cpu = train(cpus(4), o, batch, 1);
    strata_test::HostAsGpu host;
    const Trained gpu = train(gpus(4), o, batch, 1);
    CHECK(gpu.weights == cpu.weights);
    CHECK(gpu.losses == cpu.losses);
  }
}

TEST_CASE("compressed copies of GPU stages (staged on the host) give the compressed CPU run's bits") {
  for (std::size_t D : {1u, 2u}) {  // one copy: the gradient rounded too, as it would travel
    CAPTURE(D);
    const strata::PipelineOptions o{.stages = {}, .micro_batches = 2, .data_parallel = D};
    const Trained cpu = train(cpus(2 * static_cast<int>(D)), o, 25, 1, strata::Compression::BF16);
    CHECK(cpu.weights != train(cpus(2 * static_cast<int>(D)), o, 25, 1).weights);
    strata_test::HostAsGpu host;
    const Trained gpu = train(gpus(2 * static_cast<int>(D)), o, 25, 1, strata::Compression::BF16);
    CHECK(gpu.weights == cpu.weights);
    CHECK(gpu.losses == cpu.losses);
  }
}

TEST_CASE("each GPU stage keeps its variables, gradient, optimizer state and activations in its compute's memory") {
  strata_test::HostAsGpu host;
  strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
    ++made;
    return std::make_unique<CountingCompute>();
  };
  allocated = 0, made = 0;
  strata::PipelineStrategy s{gpus(3)};
  s.pipeline_options().micro_batches = 2;
  auto model = compiled(s);
  model.fit(s.distribute(dataset(25)), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  CHECK(made == 3);  // one compute per stage
  const std::size_t params = strata_test::flat_weights(model).size();
  // values, gradient, micro-batch gradient, Adam's two slots, plus activations: in the stages' memory
  CHECK(allocated >= 5 * params * sizeof(float));
  CHECK(s.pipeline_stats().steps == 9);
}

TEST_CASE("evaluate and predict on GPU stages give the CPU pipeline's results bitwise") {
  strata_test::Watchdog dog("gpu pipeline evaluate", 60s);
  const auto data = strata_test::blobs(70, 9);
  auto run = [&](const std::vector<strata::Device>& d) {
    strata::PipelineStrategy s{d};
    s.pipeline_options() = {.stages = {}, .micro_batches = 3, .schedule = Schedule::OneFOneB};
    auto m = compiled(s);
    const auto logs = m.evaluate(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
                                 {.verbose = nn::Verbosity::Silent});
    const auto p = m.predict(s.distribute(strata::data::from_tensor_slices(data.x).batch(32)));
    return std::pair{logs.at("loss"), std::vector<float>(p.data(), p.data() + p.size())};
  };
  const auto cpu = run(cpus(3));
  strata_test::HostAsGpu host;
  const auto gpu = run(gpus(3));
  CHECK(gpu.second.size() == 70 * 3);
  CHECK(gpu.second == cpu.second);
  CHECK(gpu.first == cpu.first);
}

TEST_CASE("a checkpoint of a GPU pipeline loads into the CPU pipeline, which trains on as the GPU one does") {
  strata_test::Watchdog dog("gpu pipeline checkpoint", 60s);
  const auto path = std::filesystem::temp_directory_path() / "strata_pipeline_gpu_test.ckpt";
  const strata::PipelineOptions o{.stages = {}, .micro_batches = 3, .schedule = Schedule::GPipe};
  std::vector<float> gpu_after;
  std::vector<strata::nn::NamedTensor> saved;
  {
    strata_test::HostAsGpu host;
    strata::PipelineStrategy s{gpus(2)};
    s.pipeline_options() = o;
    auto model = compiled(s);
    model.fit(s.distribute(dataset(25)), {.epochs = 1, .verbose = nn::Verbosity::Silent});
    model.save_checkpoint(path);
    saved = model.get_weights();
    model.fit(s.distribute(dataset(25)), {.epochs = 1, .verbose = nn::Verbosity::Silent});
    gpu_after = strata_test::flat_weights(model);
  }
  strata::PipelineStrategy s{cpus(2)};
  s.pipeline_options() = o;
  auto model = compiled(s);
  model.build(strata::Shape{6});
  model.load_checkpoint(path);
  const auto loaded = model.get_weights();
  REQUIRE(loaded.size() == saved.size());
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    const auto& a = loaded[i].value;
    const auto& b = saved[i].value;
    CHECK(std::vector<float>(a.data(), a.data() + a.size()) == std::vector<float>(b.data(), b.data() + b.size()));
  }
  model.fit(s.distribute(dataset(25)), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  CHECK(strata_test::flat_weights(model) == gpu_after);  // Adam's moments and the step count came across too
  std::filesystem::remove(path);
}

TEST_CASE("a custom loop's gradient hook sees a GPU stage's gradient on the host, as a CPU stage's") {
  strata_test::Watchdog dog("gpu pipeline hook", 60s);
  auto run = [](const std::vector<strata::Device>& d, std::size_t copies) {
    strata::PipelineStrategy s{d};
    s.pipeline_options() = {.stages = {}, .micro_batches = 2, .data_parallel = copies};
    auto model = compiled(s);
    std::atomic<int> seen{0};
    const nn::GradientHook clip = [&](strata::ReplicaGradient& g) {
      ++seen;
      for (float& v : g.values) v = std::clamp(v, -0.01f, 0.01f);
    };
    for (const auto& batch : s.distribute(dataset(25))) model.train_step(batch, clip);
    CHECK(seen == 9 * static_cast<int>(d.size()));  // every lane, every step
    return strata_test::flat_weights(model);
  };
  for (std::size_t copies : {1u, 2u}) {
    CAPTURE(copies);
    const auto cpu = run(cpus(2 * static_cast<int>(copies)), copies);
    strata_test::HostAsGpu host;
    CHECK(run(gpus(2 * static_cast<int>(copies)), copies) == cpu);
  }
}

TEST_CASE("a GPU stage's error (a label that is no class index) is raised at once; the model trains afterwards") {
  strata_test::Watchdog dog("gpu pipeline failure", 60s);
  strata_test::HostAsGpu host;
  auto bad = strata_test::blobs(64, 3);
  bad.y[16 + 5] = 99;  // in batch 1
  strata::PipelineStrategy s{gpus(3), strata::CommOptions{.timeout = 5s}};
  s.pipeline_options().micro_batches = 2;
  auto model = compiled(s);
  const auto started = std::chrono::steady_clock::now();
  try {
    model.fit(s.distribute(strata::data::from_tensor_slices(bad.x, bad.y).batch(16)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
    FAIL("no error");
  } catch (const strata::ReplicaError& e) {
    CHECK(e.replica() == 2);  // the last stage counts the labels
    INFO(std::string(e.what()));  // the host loss names the label; a GPU's counts them ("class indices")
    CHECK(std::string(e.what()).find("class ind") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - started < 2s);  // the deadline is 5 s
  CHECK(model.iterations() == 1);
  const auto clean = strata_test::blobs(64, 3);
  CHECK_NOTHROW(model.fit(s.distribute(strata::data::from_tensor_slices(clean.x, clean.y).batch(16)),
                          {.epochs = 1, .verbose = nn::Verbosity::Silent}));
  CHECK(model.iterations() == 5);
  for (float w : strata_test::flat_weights(model)) REQUIRE(std::isfinite(w));
}

TEST_CASE("GPU stages refuse Balance::Measured (it times layers on the host); GPUs and CPUs do not mix") {
  strata_test::HostAsGpu host;
  strata::PipelineStrategy s{gpus(2)};
  s.pipeline_options().balance = strata::Balance::Measured;
  auto model = compiled(s);
  CHECK_THROWS_WITH_AS(model.build(strata::Shape{6}),
                       doctest::Contains("Balance::Measured times the layers on the host"), strata::Error);
  CHECK_THROWS_WITH_AS(strata::PipelineStrategy({strata::gpu(0), strata::cpu(0)}),
                       doctest::Contains("all GPUs or all CPUs"), strata::Error);
}

TEST_CASE("by name: pipeline on --device gpu puts a stage per GPU replica, spread over the GPUs") {
  strata_test::HostAsGpu host;
  const strata::StrategyChoice c{.replicas = 0, .stages = 3, .micro_batches = 2, .device = strata::gpu(0), .gpus = 2};
  const auto devices = strata::with_strategy("pipeline", c, [](auto& s) -> std::vector<strata::Device> {
    if constexpr (requires { s.devices(); }) return s.devices();
    else return {};
  });
  REQUIRE(devices.size() == 3);
  CHECK(devices[0] == strata::gpu(0));
  CHECK(devices[1] == strata::gpu(1));
  CHECK(devices[2] == strata::gpu(0));
}

}  // namespace pipeline_gpu_test
