// Custom training loops across MPI ranks (issue 23; run with mpirun -np 2):
// a loop of Sequential::train_step over an iterated strategy.distribute(ds)
// gives fit's weights bit for bit under MultiWorkerMirroredStrategy and
// MultiWorkerPipelineStrategy; the gradient hook runs on every worker's
// replicas (or each rank's stage) and one worker's non-finite gradient
// skips the step on all; each replica's rows of a distributed batch.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strategy/multi_worker.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "support/quick_workers.hpp"

namespace custom_loop_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using namespace std::chrono_literals;

namespace {

const strata_test::Blobs& data() {
  static const strata_test::Blobs d = strata_test::blobs(70, 3);
  return d;
}
// The same data and seed on every rank: every worker iterates the same global batches.
auto dataset() { return strata::data::from_tensor_slices(data().x, data().y).shuffle(70, 9).batch(16); }

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

constexpr int epochs = 2;

template <class S>
std::vector<float> with_fit(S& s) {
  auto model = make_model(s);
  model.fit(s.distribute(dataset()), {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  return strata_test::flat_weights(model);
}

template <class S>
std::vector<float> with_loop(S& s, const nn::GradientHook& hook = {}) {
  auto model = make_model(s);
  auto train = s.distribute(dataset());
  for (int epoch = 0; epoch < epochs; ++epoch) {
    model.reset_metrics();
    nn::Logs logs;
    for (const auto& batch : train) logs = model.train_step(batch, hook);
    CHECK(std::isfinite(logs.at("loss")));
  }
  return strata_test::flat_weights(model);
}

strata::MpiOptions quick() {
  strata::MpiOptions o;
  o.timeout = 20s;
  return o;
}

}  // namespace

TEST_CASE("multi-worker: a custom loop of train_step gives fit's weights bit for bit") {
  for (int local : {1, 2}) {
    CAPTURE(local);
    strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(local), strata_test::quick_workers()};
    const auto fit = with_fit(s);
    CHECK(with_loop(s) == fit);
    std::mutex mu;
    std::vector<int> ids;
    CHECK(with_loop(s, [&](strata::ReplicaGradient& g) {
            const std::lock_guard lock{mu};
            ids.push_back(g.replica);
            CHECK(g.replicas == s.num_replicas_in_sync());
          }) == fit);
    // this worker's replicas, once per step (5 steps an epoch)
    REQUIRE(ids.size() == static_cast<std::size_t>(5 * epochs * local));
    for (int id : ids) CHECK((id >= s.first_local_replica() && id < s.first_local_replica() + local));
  }
}

// GPU replicas across workers (stand-in GPUs, tests/device/host_as_gpu.hpp: the device executor, the device
// team's local sum, the host-staged sum across workers): the custom loop is fit's step there too, the hook
// sees each local replica's gradient, and both give the CPU replicas' bits.
TEST_CASE("multi-worker, GPU replicas (stand-ins): a custom loop of train_step gives fit's weights, the CPU replicas' bits") {
  for (int local : {1, 2}) {
    CAPTURE(local);
    strata::MultiWorkerMirroredStrategy cpus{strata::cpu_replicas(local), strata_test::quick_workers()};
    const auto cpu_fit = with_fit(cpus);
    strata_test::HostAsGpu host;
    strata::MultiWorkerMirroredStrategy s{strata::virtual_gpus(0, local), strata_test::quick_workers()};
    const auto fit = with_fit(s);
    CHECK(fit == cpu_fit);
    std::mutex mu;
    std::vector<int> ids;
    CHECK(with_loop(s, [&](strata::ReplicaGradient& g) {
            const std::lock_guard lock{mu};
            ids.push_back(g.replica);
          }) == fit);
    CHECK(ids.size() == static_cast<std::size_t>(5 * epochs * local));
  }
}

TEST_CASE("multi-worker: one worker's non-finite gradient skips the step on every worker") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers()};
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 1});
  model.build(strata::Shape{6});
  const auto before = strata_test::flat_weights(model);
  const int last = s.num_workers() - 1;
  for (const auto& b : s.distribute(dataset()))
    model.train_step(b, [&](strata::ReplicaGradient& g) {
      if (g.replica == last) g.values[0] = INFINITY;
    });
  CHECK(strata_test::flat_weights(model) == before);
  CHECK(model.iterations() == 0);
}

TEST_CASE("multi-worker: each replica of each worker takes its rows of a distributed batch") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), strata_test::quick_workers()};
  const int P = s.num_replicas_in_sync();
  for (const auto& batch : s.distribute(dataset())) {
    std::vector<std::size_t> rows(2);
    s.run([&](auto& ctx) {
      const auto [x, y] = batch.local(ctx);
      rows[static_cast<std::size_t>(ctx.replica_id_in_sync_group() - s.first_local_replica())] = x.shape()[0];
    });
    for (int r = 0; r < 2; ++r)
      CHECK(rows[static_cast<std::size_t>(r)] ==
            strata::shard_range(batch.size(), static_cast<std::size_t>(P),
                                static_cast<std::size_t>(s.first_local_replica() + r))
                .size());
  }
}

TEST_CASE("multi-worker, data sharded by file: a custom loop of train_step gives fit's weights bit for bit") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), strata_test::quick_workers()};
  std::vector<std::filesystem::path> files;  // one per worker, read from memory: 35 rows each
  for (int f = 0; f < s.num_workers(); ++f) files.push_back("part" + std::to_string(f));
  const auto sharded = [&] {
    return s.distribute(strata::data::from_files(files, [](const std::filesystem::path& p) {
                          const auto b = strata_test::blobs(35, 100 + std::stoul(p.string().substr(4)));
                          return strata::data::from_tensor_slices(b.x, b.y);
                        }).batch(16));
  };
  auto fit_model = make_model(s);
  fit_model.fit(sharded(), {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  auto model = make_model(s);
  auto train = sharded();
  REQUIRE(train.per_worker);
  for (int epoch = 0; epoch < epochs; ++epoch)
    for (const auto& batch : train) {
      CHECK(batch.first == s.first_local_replica());
      CHECK(batch.parts == 2);
      model.train_step(batch);
    }
  CHECK(strata_test::flat_weights(model) == strata_test::flat_weights(fit_model));
  CHECK(model.iterations() == fit_model.iterations());
}

TEST_CASE("multi-worker pipeline: a custom loop of train_step gives fit's weights bit for bit") {
  strata::MultiWorkerPipelineStrategy s{quick()};
  s.pipeline_options().micro_batches = 2;
  const auto fit = with_fit(s);
  std::size_t calls = 0;
  std::size_t slice = 0;
  const auto loop = with_loop(s, [&](strata::ReplicaGradient& g) {  // one stage on this rank: its slice
    ++calls;
    slice = g.values.size();
    CHECK(g.replica == s.worker_index());
  });
  CHECK(loop == fit);
  CHECK(calls == 5 * epochs);
  CHECK(slice > 0);
  CHECK(slice < fit.size());
}

}  // namespace custom_loop_test
