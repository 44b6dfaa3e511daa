// Pins the bits of short training runs under every in-process strategy, so
// that a refactor of the training machinery (issue 11: the strategy
// executes the step) provably keeps behaviour: the weights after training
// hash to the values recorded with the code before the change.
//
// The recorded hashes hold for the OpenBLAS kernel they were recorded with
// (its matrix products' rounding depends on the CPU's kernel); on another
// kernel the test says so and checks what holds everywhere: runs repeat
// bitwise, and one replica under any strategy is the default strategy.
#include <doctest/doctest.h>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/device/device_collectives.hpp>
#include <strata/strategy/parameter_server.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"

namespace pinned_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;

namespace {

std::uint64_t fnv1a(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    unsigned char b[sizeof f];
    std::memcpy(b, &f, sizeof f);
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  }
  return h;
}

// An MLP with an L2 regularizer and a dropout layer (whose masks are keyed
// by seed, step and replica), trained with Adam for 3 epochs; weights,
// then the epoch losses, hashed.
template <class S>
std::uint64_t run(S& s) {
  const auto data = strata_test::blobs(203, 11);  // 203 rows: a last partial batch, uneven splits
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                          nn::Dropout{0.25f}, nn::Dense{8}, nn::ReLU{}, nn::Dense{3}};
  });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 5});
  const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(24)),
                           {.epochs = 3, .verbose = nn::Verbosity::Silent});
  std::vector<float> bits = strata_test::flat_weights(model);
  for (const auto& logs : h.epochs()) bits.push_back(static_cast<float>(logs.at("loss")));
  return fnv1a(bits);
}

struct Pinned {
  const char* name;
  std::uint64_t hash;
};

// Recorded with the code before issue 11 (commit c79a7c3), g++ 12 -O3, on
// the OpenBLAS kernel named below.
constexpr const char* recorded_core = "Haswell";
constexpr Pinned recorded[] = {
    {"default", 0x06c1f5fe62c06f0bull},           {"one_device", 0x06c1f5fe62c06f0bull},
    {"mirrored_1", 0x06c1f5fe62c06f0bull},        {"mirrored_2", 0xd3666755eed93ddeull},
    {"mirrored_3", 0xd2a8c814bc8563c1ull},        {"central_storage_2", 0xd3666755eed93ddeull},
    {"central_storage_3", 0xd2a8c814bc8563c1ull}, {"parameter_server_k0_2", 0x815a2159d7ebffa8ull},
};

std::uint64_t expected(const std::string& name) {
  for (const auto& p : recorded)
    if (name == p.name) return p.hash;
  FAIL("no recorded hash for ", name);
  return 0;
}

}  // namespace

TEST_CASE("short training runs keep their recorded bits under every in-process strategy") {
  std::vector<std::pair<std::string, std::uint64_t>> got;
  got.emplace_back("default", run(strata::get_strategy()));
  {
    strata::OneDeviceStrategy s{strata::cpu(0)};
    got.emplace_back("one_device", run(s));
  }
  for (int p : {1, 2, 3}) {
    strata::MirroredStrategy s{strata::cpu_replicas(p)};
    got.emplace_back("mirrored_" + std::to_string(p), run(s));
  }
  for (int p : {2, 3})  // the sharded update (ZeRO-1) makes the same sums: the same bits
    for (auto mode : {strata::ShardedUpdate::Off, strata::ShardedUpdate::On}) {
      strata::MirroredStrategy s{strata::cpu_replicas(p)};
      s.executor_options().sharded_update = mode;
      CHECK(run(s) == got[static_cast<std::size_t>(p) + 1].second);
    }
  for (int p : {2, 3}) {
    strata::CentralStorageStrategy s{strata::cpu_replicas(p)};
    got.emplace_back("central_storage_" + std::to_string(p), run(s));
  }
  {
    strata::ParameterServerStrategy s{{.workers = 2, .servers = 1, .staleness = std::uint64_t{0}}};
    got.emplace_back("parameter_server_k0_2", run(s));
  }
  for (const auto& [name, h] : got)  // to re-record on another kernel
    std::printf("  {\"%s\", 0x%016llxull},\n", name.c_str(), static_cast<unsigned long long>(h));

  // Holds on every kernel: one replica is one replica, whatever the strategy.
  CHECK(got[1].second == got[0].second);
  CHECK(got[2].second == got[0].second);
  // ... and a run repeats bitwise.
  {
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    CHECK(run(s) == got[3].second);
  }

  const std::string core = openblas_get_corename();
  if (core != recorded_core) {
    MESSAGE("OpenBLAS kernel " << core << " is not the one the hashes were recorded with (" << std::string(recorded_core)
                               << "): recorded bits not compared");
    return;
  }
  for (const auto& run_hash : got) {  // not a structured binding: INFO captures it (clang 14)
    INFO(run_hash.first);
    CHECK(run_hash.second == expected(run_hash.first));
  }
}

// The executor of a device with its own memory (a GPU's, strategy/
// device_executor.hpp) is the same training loop as one CPU replica: run on
// the host's compute in place of a GPU's, it gives one replica's bits.
// (On a GPU the kernels round differently: tests/gpu compare within a
// tolerance.)
TEST_CASE("the device executor on the host compute trains bitwise like one CPU replica") {
  strata::OneDeviceStrategy cpu{strata::cpu(0)};
  const std::uint64_t want = run(cpu);
  auto& maker = strata::detail::gpu_backend().make;
  const auto saved = maker;
  maker = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
    return std::make_unique<strata::kernels::HostCompute>();
  };
  strata::OneDeviceStrategy dev{strata::gpu(0)};
  const std::uint64_t got = run(dev);
  maker = saved;
  CHECK(got == want);
}

// A small CNN trained with Adam under one device: what a GPU step runs as
// element bodies of kernels/bodies/ (Adam, ReLU's gradient, im2col, col2im,
// max pooling and its gradient, a bias added after the product).
template <class S>
std::vector<float> cnn_weights(S& s) {
  const auto data = strata_test::blobs(40, 13);  // 6 features: read as 3 x 2 images of one channel
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}},          nn::Reshape{{3, 2, 1}},     nn::Conv2D{4, 2, {.padding = nn::Padding::Same}},
                          nn::ReLU{},              nn::MaxPool2D{{2, 1}},      nn::Flatten{},
                          nn::Dense{8, {.activation = nn::Activation::ReLU}}, nn::Dense{3}};
  });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(8)),
            {.epochs = 2, .verbose = nn::Verbosity::Silent});
  return strata_test::flat_weights(model);
}

TEST_CASE("a GPU step's kernel bodies on the stand-in device: the CPU's bits; in a GPU's Dense order, within rounding") {
  strata::OneDeviceStrategy cpu{strata::cpu(0)};
  const auto want = cnn_weights(cpu);
  {
    strata_test::HostAsGpu host;  // the bodies where a GPU runs them; Dense as the host orders it
    const auto c = strata::detail::make_compute(strata::gpu(0), {});
    CHECK(c->where() == strata::kernels::Where::StandIn);
    CHECK(c->name() == "stand-in GPU 0 (host memory)");
    strata::OneDeviceStrategy dev{strata::gpu(0)};
    CHECK(cnn_weights(dev) == want);  // the bodies against the host's own loops and SSE
  }
  strata_test::HostAsGpu host{strata::kernels::DenseOrder::Device};  // the bias after the product, by its body
  strata::OneDeviceStrategy dev{strata::gpu(0)};
  const auto got = cnn_weights(dev);
  REQUIRE(got.size() == want.size());
  float worst = 0.f;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  CHECK(worst < 1e-4f);
}

TEST_CASE("a GPU device without the CUDA backend is an error naming what to include") {
  auto& maker = strata::detail::gpu_backend().make;
  const auto saved = maker;
  maker = nullptr;
  strata::OneDeviceStrategy dev{strata::gpu(0)};
  CHECK_THROWS_WITH_AS(run(dev), doctest::Contains("/gpu:0 needs the CUDA backend: include <strata/cuda.hpp>"),
                       strata::Error);
  maker = saved;
  CHECK_THROWS_WITH_AS(strata::PipelineStrategy({strata::gpu(0), strata::cpu(1)}),
                       doctest::Contains("/gpu:0 and /cpu:1: a strategy's replicas are all GPUs or all CPUs"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(strata::MirroredStrategy({strata::gpu(0), strata::cpu(1)}),
                       doctest::Contains("/gpu:0 and /cpu:1: a strategy's replicas are all GPUs or all CPUs"),
                       strata::Error);
  CHECK_THROWS_AS(strata::CentralStorageStrategy({strata::cpu(0), strata::gpu(0)}), strata::Error);
  maker = nullptr;
  strata::MirroredStrategy two{strata::virtual_gpus(0, 2)};
  CHECK_THROWS_WITH_AS(run(two), doctest::Contains("/gpu:0 needs the CUDA backend: include <strata/cuda.hpp>"),
                       strata::Error);
  maker = saved;
}

// MirroredStrategy's executor of GPU replicas (strategy/device_mirrored_
// executor.hpp: per-replica copies in each device's memory, the gradients
// summed by the device collectives, here staged through host memory) is the
// CPU replicas' training step: on the host's compute in place of the GPUs',
// 2 and 3 replicas give the CPU MirroredStrategy's bits, with the update
// sharded over the replicas (reduce-scatter, slices, all-gather) or not.
TEST_CASE("MirroredStrategy's GPU executor on the host compute trains bitwise like CPU replicas") {
  for (int p : {2, 3}) {
    CAPTURE(p);
    strata::MirroredStrategy cpu{strata::cpu_replicas(p)};
    const std::uint64_t want = run(cpu);
    strata_test::HostAsGpu host;
    strata::MirroredStrategy gpus{strata::virtual_gpus(0, p)};  // Auto: sharded at 3
    CHECK(run(gpus) == want);
    for (auto mode : {strata::ShardedUpdate::Off, strata::ShardedUpdate::On}) {
      strata::MirroredStrategy s{strata::virtual_gpus(0, p)};
      s.executor_options().sharded_update = mode;
      CHECK(run(s) == want);
    }
  }
}

// CentralStorageStrategy on GPU replicas: variables and update on the host,
// each replica's compute on its device (the central value uploaded each
// step, the gradient downloaded), or (CentralVariables::Gpu) variables and
// update on replica 0's device, its values sent to the others each step:
// either way the CPU run's bits on the host compute.
TEST_CASE("CentralStorageStrategy with GPU compute, on the host compute, trains bitwise like CPU replicas") {
  for (int p : {2, 3}) {
    CAPTURE(p);
    strata::CentralStorageStrategy cpu{strata::cpu_replicas(p)};
    const std::uint64_t want = run(cpu);
    strata_test::HostAsGpu host;
    strata::CentralStorageStrategy gpus{strata::virtual_gpus(0, p)};
    CHECK(run(gpus) == want);
    strata::CentralStorageStrategy on_gpu{strata::virtual_gpus(0, p)};
    on_gpu.executor_options().central_variables = strata::CentralVariables::Gpu;
    CHECK(run(on_gpu) == want);  // (without the values sent, replicas 1.. would train on stale ones)
  }
}

// The host-staged device collectives (device/device_collectives.hpp) wait
// only inside their team's calls: a replica that never arrives is named by a
// CollectiveTimeout within the deadline, in each of them, and a reset makes
// the team usable again (no hang, nothing left half done).
TEST_CASE("host-staged device collectives: a replica that never arrives is named within the timeout") {
  using namespace std::chrono_literals;
  strata::detail::HostStagedCollectives coll(2, strata::CommOptions{.timeout = 200ms}, "test");
  auto& c = strata::kernels::host_compute();
  std::vector<float> a(5, 1.f), out(3, 0.f);
  const auto started = std::chrono::steady_clock::now();
  const auto missing = doctest::Contains("missing: replica 1");
  CHECK_THROWS_WITH_AS(coll.broadcast(0, c, a.data(), a.size(), 0), missing, strata::CollectiveTimeout);
  coll.reset();
  CHECK_THROWS_WITH_AS(coll.reduce_scatter_sum(0, c, a.data(), out.data(), a.size()), missing,
                       strata::CollectiveTimeout);
  coll.reset();
  CHECK_THROWS_WITH_AS(coll.all_gather(0, c, out.data(), a.data(), a.size()), missing, strata::CollectiveTimeout);
  CHECK(std::chrono::steady_clock::now() - started < 10s);
  // both present after a reset: the sum's slices and the gathered values
  coll.reset();
  std::vector<float> b(5, 2.f), out0(3, 0.f), out1(2, 0.f);
  std::thread other([&] { coll.reduce_scatter_sum(1, c, b.data(), out1.data(), b.size()); });
  coll.reduce_scatter_sum(0, c, a.data(), out0.data(), a.size());
  other.join();
  CHECK(out0 == std::vector<float>(3, 3.f));
  CHECK(out1 == std::vector<float>(2, 3.f));
}

}  // namespace pinned_test
