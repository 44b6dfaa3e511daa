// Gradient buckets across workers (issue 25), under mpirun -np 2:
// MultiWorkerMirroredStrategy's buckets, each a hierarchical all-reduce run
// by the replica's own progress thread while backward goes on, give the
// flat reduction's weights bit for bit, with one and two replicas a worker;
// the later layers' buckets are under way before the first layer's
// backward; a replica failing with buckets in flight is named on every worker.
// GPU replicas (on the host's compute) bucket across workers too.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/strategy/multi_worker.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "support/identity_layer.hpp"
#include "support/quick_workers.hpp"

namespace mpi_buckets_test {  // each test file in its own namespace: a unity build joins them

using namespace std::chrono_literals;
namespace nn = strata::nn;

namespace {

std::atomic<std::uint64_t> least{~0ull};  // buckets a replica had started when its probe's backward ran (least)
std::atomic<int> fail_on{-1};             // the global replica whose probe throws in backward

//! The identity; in backward, how many gradient buckets this replica's
//! thread started since its forward (the layers after it are done).
class Probe final : public strata_test::Identity<Probe> {
 public:
  [[nodiscard]] std::string kind() const override { return "Probe"; }
  void on_forward(const nn::RunInfo& info) {
    replica_ = info.replica;
    at_forward_ = strata::detail::buckets_started_here();
  }
  void on_backward() {
    const std::uint64_t started = strata::detail::buckets_started_here() - at_forward_;
    for (std::uint64_t cur = least.load(); started < cur && !least.compare_exchange_weak(cur, started);) {
    }
    if (replica_ == fail_on.load()) throw std::runtime_error("probe: replica " + std::to_string(replica_) + " fails");
  }

 private:
  int replica_ = 0;
  std::uint64_t at_forward_ = 0;
};

nn::Sequential probed_mlp() {
  return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        Probe{}, nn::Dense{8, {.l2 = 2e-3f}}, nn::ReLU{}, nn::Dense{3}};
}

//! The weights after 3 epochs of Adam on blobs (the same data on every
//! worker, each replica its rows of every global batch), buckets of `bytes`.
std::vector<float> train(int local, std::size_t bytes, bool gpus = false) {
  strata::MultiWorkerMirroredStrategy s{gpus ? strata::virtual_gpus(0, local) : strata::cpu_replicas(local),
                                        strata_test::quick_workers(20s)};
  s.executor_options().bucket_bytes = bytes;
  const auto data = strata_test::blobs(150, 11);
  auto model = s.scope(probed_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 7});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
            {.epochs = 3, .verbose = nn::Verbosity::Silent});
  return strata_test::flat_weights(model);
}

}  // namespace

TEST_CASE("bucketed and flat all-reduces across workers give the same weights bit for bit") {
  // the probed MLP's variables: 96+16 | 128+8 | 24+3 floats; 1, 128, 600 bytes: 6, 3 and 2 buckets; 1 MiB: one
  for (int local : {1, 2}) {
    CAPTURE(local);
    least = ~0ull;
    const auto flat = train(local, 0);
    CHECK(least.load() == 0);  // flat: nothing reduced during backward
    for (std::size_t bytes : {std::size_t{1}, std::size_t{128}, std::size_t{600}, std::size_t{1} << 20}) {
      CAPTURE(bytes);
      least = ~0ull;
      CHECK(train(local, bytes) == flat);
      // the buckets of the layers after the probe were started before its backward ran
      CHECK(least.load() == (bytes == 1 ? 4u : bytes == 128 ? 2u : bytes == 600 ? 1u : 0u));
    }
  }
}

TEST_CASE("GPU replicas across workers (on the host's compute) bucket too: the CPU flat run's bits") {
  // each bucket's local sum is started in backward (host-staged on the host's compute), its sum across
  // workers and the local copy of it follow when the update waits for it, in bucket order on every worker
  for (int local : {1, 2}) {
    CAPTURE(local);
    const auto flat = train(local, 0);
    strata_test::HostAsGpu host;
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{128}, std::size_t{1} << 20}) {
      CAPTURE(bytes);
      least = ~0ull;
      CHECK(train(local, bytes, true) == flat);
      CHECK(least.load() == (bytes == 1 ? 4u : bytes == 128 ? 2u : 0u));
    }
  }
}

TEST_CASE("a replica failing with buckets in flight is named on every worker") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), strata_test::quick_workers(10s)};
  s.executor_options().bucket_bytes = 1;
  const auto data = strata_test::blobs(64, 3);
  auto model = s.scope(probed_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  fail_on = 3;  // worker 1's second replica, after its last two layers' buckets started
  const auto t0 = std::chrono::steady_clock::now();
  try {
    model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
    FAIL("fit should have thrown");
  } catch (const strata::ReplicaError& e) {
    INFO("the error: ", std::string(e.what()));
    CHECK(std::string(e.what()).find("probe: replica 3 fails") != std::string::npos);
    if (s.worker_index() == 1) CHECK(e.replica() == 3);
  }
  fail_on = -1;
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // released by the abort, not the timeout
}

}  // namespace mpi_buckets_test
