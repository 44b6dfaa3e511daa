// Tensor parallelism across the workers of an mpirun job (issue 26): each
// worker's replicas hold copies of a small GPT block split over T of them
// (a copy never crosses workers), the copies data-parallel across workers.
// Against one replica in one process: within float rounding; run to run and
// worker to worker: bitwise; what cannot be placed is refused alike on every
// worker; a replica that fails mid-step brings every worker down, in bounded time.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/nn.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/strategy/by_name_mpi.hpp>
#include <strata/strategy/multi_worker.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "support/identity_layer.hpp"
#include "support/quick_workers.hpp"
#include "parallel/tensor/tiny_gpt.hpp"
#include "chief_saving_alone.hpp"

namespace tensor_parallel_mpi_test {  // each test file in its own namespace: a unity build joins them

namespace nn = strata::nn;
using strata::Tensor;
using namespace std::chrono_literals;

using strata_test::flat;
using strata_test::max_diff;
using strata_test::Tokens;
nn::Model gpt(std::size_t heads = 4) { return strata_test::tiny_gpt(heads); }

struct Run {
  std::vector<float> weights;
  double loss = 0;
  std::string choice;
};

// Two epochs of AdamW (decay, global-norm clipping), batches of 12; `sgd`: one step of plain SGD.
template <class S>
Run train(S& s, bool sgd = false) {
  const Tokens d;
  auto model = s.scope([] { return gpt(); });
  if (sgd)
    model.compile(nn::SGD{0.5}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  else
    model.compile(nn::AdamW{1e-2f, {.weight_decay = 0.1f, .global_clipnorm = 1.f}},
                  nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
                           {.epochs = sgd ? 1 : 2, .verbose = nn::Verbosity::Silent, .steps_per_epoch = sgd ? 1u : 0u});
  return {flat(model.get_weights()), h.at("loss").back(), model.gradient_reduction()};
}

Run across_workers(int local, std::size_t T, bool sgd = false, strata::Compression c = strata::Compression::None,
                   std::size_t bucket_bytes = 0, bool gpus = false) {
  std::vector<int> ids;
  for (int i = 0; i < local; ++i) ids.push_back(i);
  strata::MultiWorkerMirroredStrategy s{gpus ? strata::gpus(ids) : strata::cpu_replicas(local),
                                        strata_test::quick_workers()};
  s.executor_options().tensor_parallel = T;
  s.executor_options().compression = c;
  s.executor_options().bucket_bytes = bucket_bytes;
  return train(s, sgd);
}

Run one_replica(bool sgd = false) {
  strata::MirroredStrategy s{strata::cpu_replicas(1)};
  return train(s, sgd);
}

// The chief's values, on every worker.
std::vector<float> chiefs(std::vector<float> v) {
  MPI_Bcast(v.data(), static_cast<int>(v.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  return v;
}

int workers() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
bool rank_is_last() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r == workers() - 1;
}

TEST_CASE("tensor parallel across workers: D x T as one replica within rounding, bitwise run to run and worker to worker") {
  const Run one = one_replica(), first = one_replica(true);
  const int W = workers();
  for (const auto& shape : {std::pair{2, std::size_t{2}}, std::pair{4, std::size_t{2}}, std::pair{4, std::size_t{4}}}) {
    const int local = shape.first;  // (not a structured binding: clang cannot capture one in INFO's lambda)
    const std::size_t T = shape.second;
    INFO(W, " workers x ", local, " replicas, T = ", T);
    const Run tp = across_workers(local, T);
    const std::size_t copies = static_cast<std::size_t>(W * local) / T;
    CHECK(tp.choice.find("1 attention layer split by heads") != std::string::npos);
    CHECK(tp.choice.find(std::to_string(copies) + " data-parallel copies") != std::string::npos);
    CHECK(tp.choice.find("across " + std::to_string(W) + " workers") != std::string::npos);
    CHECK(max_diff(across_workers(local, T, true).weights, first.weights) < 1e-6f);
    CHECK(max_diff(tp.weights, one.weights) < 2e-4f);
    CHECK(tp.loss == doctest::Approx(one.loss).epsilon(1e-5));
    CHECK(tp.weights != one.weights);  // the split products add in another order (docs/tensor-parallelism.md)
    CHECK(chiefs(tp.weights) == tp.weights);  // every worker holds the chief's bits
    CHECK(across_workers(local, T).weights == tp.weights);  // and a second run the same bits
  }
}

TEST_CASE("tensor parallel across workers: the same as in one process's replicas, within rounding") {
  const int W = workers();
  strata::MirroredStrategy in_one{strata::cpu_replicas(2 * W)};
  in_one.executor_options().tensor_parallel = 2;
  const Run here = train(in_one), there = across_workers(2, 2);
  CHECK(max_diff(here.weights, there.weights) < 2e-4f);
}

// Compression: the copies' sum crosses workers in 16 bits (the members' parts
// of the logical gradient, zeros elsewhere: those round to themselves).
TEST_CASE("tensor parallel across workers with compression: near FP32, the chief's bits everywhere, the same run to run") {
  const int W = workers();
  for (int local : {2, 4}) {
    INFO(W, " workers x ", local, " replicas, T = 2");
    const Run fp32 = across_workers(local, 2);
    for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
      INFO(strata::to_string(c));
      const Run tp = across_workers(local, 2, false, c);
      CHECK(tp.choice.find("rounded to " + std::string(strata::to_string(c))) != std::string::npos);
      CHECK(tp.weights != fp32.weights);
      CHECK(max_diff(tp.weights, fp32.weights) < 2e-2f);
      CHECK(tp.loss == doctest::Approx(fp32.loss).epsilon(1e-3));
      CHECK(chiefs(tp.weights) == tp.weights);
      CHECK(across_workers(local, 2, false, c).weights == tp.weights);
    }
  }
  // one copy a worker, against the same copies in one process (their sum in FP32, rounded once): between two
  // workers a + b rounded once, the same bits; between more, MPI's sum rounds per step, within rounding
  strata::MirroredStrategy in_one{strata::cpu_replicas(2 * W)};
  in_one.executor_options().tensor_parallel = 2;
  in_one.executor_options().compression = strata::Compression::BF16;
  const Run here = train(in_one), there = across_workers(2, 2, false, strata::Compression::BF16);
  if (W == 2) CHECK(there.weights == here.weights);
  else CHECK(max_diff(there.weights, here.weights) < 2e-2f);
}

// Gradient buckets (issue 25): the copies' sum of the logical gradient all-reduced bucket by bucket as
// backward ends each, beside the members' sums inside backward.
TEST_CASE("tensor parallel across workers by buckets: the flat sum's weights, compressed too, the chief's bits everywhere") {
  const int W = workers();
  const bool two = W == 2;  // between two workers each element is a + b whatever the cut
  for (int local : {2, 4}) {
    INFO(W, " workers x ", local, " replicas, T = 2");
    const Run flat_sum = across_workers(local, 2);
    for (std::size_t bytes : {std::size_t{1}, std::size_t{2048}, std::size_t{1} << 20}) {
      INFO("buckets of ", bytes, " bytes");
      const Run b = across_workers(local, 2, false, strata::Compression::None, bytes);
      CHECK_MESSAGE(b.choice.find("KiB, each all-reduced as backward ends it") != std::string::npos, b.choice);
      if (two) CHECK(b.weights == flat_sum.weights);
      else CHECK(max_diff(b.weights, flat_sum.weights) < 2e-4f);  // MPI's algorithm may differ by size
      CHECK(chiefs(b.weights) == b.weights);
    }
  }
  const Run flat16 = across_workers(2, 2, false, strata::Compression::BF16);
  const Run b16 = across_workers(2, 2, false, strata::Compression::BF16, 1);
  if (two) CHECK(b16.weights == flat16.weights);  // each bucket rounded with its residual, as the flat vector is
  else CHECK(max_diff(b16.weights, flat16.weights) < 2e-2f);
  CHECK(b16.weights != across_workers(2, 2, false, strata::Compression::None, 1).weights);
}

// The host's compute said to be a device's: every buffer goes the way a GPU replica's does (here, the
// gradient fetched to the host range by range as backward tells it, for the logical buckets).
struct DeviceLikeCompute : strata::kernels::HostCompute {
  [[nodiscard]] strata::kernels::Where where() const noexcept override { return strata::kernels::Where::Cuda; }
};

TEST_CASE("tensor parallel across workers by buckets on GPU replicas (the host's compute standing in): the CPU bits") {
  for (strata::Compression c : {strata::Compression::None, strata::Compression::BF16}) {
    INFO(strata::to_string(c));
    const Run cpu = across_workers(2, 2, false, c, 1);
    strata_test::HostAsGpu host;
    strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
      return std::make_unique<DeviceLikeCompute>();
    };
    const Run gpu = across_workers(2, 2, false, c, 1, true);
    CHECK_MESSAGE(gpu.choice.find("KiB, each all-reduced as backward ends it") != std::string::npos, gpu.choice);
    CHECK(gpu.weights == cpu.weights);
  }
}

std::atomic<std::uint64_t> least_started{~0ull};  // buckets a replica started between its forward and its backward
std::atomic<int> steps_probed{0};
std::atomic<bool> probe_fails{false};
//! The identity, with a look from inside backward: the gradient buckets this replica's thread started since
//! its forward (the layers after it have run their backward by then); throws when probe_fails.
class Probe final : public strata_test::Identity<Probe> {
 public:
  [[nodiscard]] std::string kind() const override { return "Probe"; }
  void on_forward(const nn::RunInfo& /*info*/) { at_forward_ = strata::detail::buckets_started_here(); }
  void on_backward() {
    const std::uint64_t started = strata::detail::buckets_started_here() - at_forward_;
    for (std::uint64_t cur = least_started.load(); started < cur && !least_started.compare_exchange_weak(cur, started);) {
    }
    steps_probed.fetch_add(1);
    if (probe_fails.load()) throw std::runtime_error("probe: a member fails in backward");
  }

 private:
  std::uint64_t at_forward_ = 0;
};

TEST_CASE("tensor parallel across workers by buckets: under way before the first layer's backward; a failure is named") {
  const auto data = strata_test::blobs(64, 3);
  auto run = [&](std::size_t bytes, std::chrono::milliseconds timeout = 20s) {
    strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), strata_test::quick_workers(timeout)};
    s.executor_options().tensor_parallel = 2;
    s.executor_options().bucket_bytes = bytes;
    auto model = s.scope([] {  // a Dense (whole), a probe, then a Dense pair split column then row
      return nn::Sequential{nn::Input{{6}}, nn::Dense{8, {.activation = nn::Activation::Tanh}}, Probe{},
                            nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dense{3}};
    });
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
    model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
    CHECK(model.gradient_reduction().find("1 Dense pair split column then row") != std::string::npos);
  };
  least_started = ~0ull;
  steps_probed = 0;
  run(1);  // a bucket per variable: the pair's backward has started some of its four on every member (of six)
  REQUIRE(steps_probed.load() > 0);
  CHECK(least_started.load() >= 2);
  least_started = ~0ull;
  run(0);  // flat: nothing before the step's end
  CHECK(least_started.load() == 0);
  // every member of the last worker fails in backward, after its later buckets started: every worker hears it
  probe_fails = rank_is_last();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run(1, 10s);
    FAIL_CHECK("no error");
  } catch (const std::exception& e) {
    CHECK_MESSAGE(std::string(e.what()).find("probe: a member fails in backward") != std::string::npos, e.what());
  }
  probe_fails = false;
  CHECK(std::chrono::steady_clock::now() - t0 < 8s);  // the failure is told, not waited out (10 s)
}

// ZeRO 1 (ShardedUpdate::On) across workers: each replica of the job owns a slice of the logical parameters
// (its worker's block, cut among the worker's replicas) and keeps that slice's optimizer state.
struct ShardedRun {
  std::vector<float> weights;
  std::vector<std::vector<float>> state;  // from the chief's checkpoint, on the chief
  std::string choice;
};
ShardedRun sharded_across(int local, strata::ShardedUpdate mode, int epochs = 2, const std::string& load = {},
                          const std::string& save = {}, strata::Compression c = strata::Compression::None) {
  const Tokens d;
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(local), strata_test::quick_workers()};
  s.executor_options().tensor_parallel = 2;
  s.executor_options().sharded_update = mode;
  s.executor_options().compression = c;
  auto model = s.scope([] { return gpt(); });
  model.compile(nn::AdamW{1e-2f, {.weight_decay = 0.1f}}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {},
                {.seed = 3});
  if (!load.empty()) {
    model.build(strata::Shape{8});
    model.load_checkpoint(load);
  }
  model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
            {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  const std::string path = save.empty() ? "/tmp/strata_mpi_tp_zero1_state.ckpt" : save;
  model.save_checkpoint(path);  // every worker: the state is joined over them, the chief writes
  ShardedRun out{flat(model.get_weights()), {}, model.gradient_reduction()};
  if (s.is_chief())
    for (const auto& e : strata::io::read_tensor_file(path, "test").tensors)
      if (e.name.rfind("optimizer/", 0) == 0) out.state.emplace_back(e.value.data(), e.value.data() + e.value.size());
  s.communicator().barrier();
  return out;
}

TEST_CASE("tensor parallel across workers with ZeRO 1: the unsharded update's weights and state; checkpoints move") {
  using strata::ShardedUpdate;
  const int W = workers();
  const bool two = W == 2;  // between two workers every sum is a + b, whichever collective adds it
  for (int local : {2, 4}) {
    INFO(W, " workers x ", local, " replicas, T = 2");
    const ShardedRun off = sharded_across(local, ShardedUpdate::Off), on = sharded_across(local, ShardedUpdate::On);
    CHECK(on.choice.find("the update sharded (ZeRO 1) over the " + std::to_string(W * local) + " replicas of " +
                         std::to_string(W) + " workers") != std::string::npos);
    if (two) CHECK(on.weights == off.weights);
    else CHECK(max_diff(on.weights, off.weights) < 2e-4f);  // MPI adds three workers in other orders; Adam carries it
    CHECK(chiefs(on.weights) == on.weights);
    CHECK(on.state.size() == off.state.size());
    for (std::size_t k = 0; k < on.state.size() && k < off.state.size(); ++k) {
      if (two) CHECK(on.state[k] == off.state[k]);
      else CHECK(max_diff(on.state[k], off.state[k]) < 1e-4f);
    }
  }
  // one epoch sharded, saved (collective), then the second from the file, sharded and not
  const std::string file = "/tmp/strata_mpi_tp_zero1_resume.ckpt";
  sharded_across(2, ShardedUpdate::On, 1, {}, file);
  const ShardedRun straight = sharded_across(2, ShardedUpdate::On);
  for (ShardedUpdate mode : {ShardedUpdate::On, ShardedUpdate::Off}) {
    const ShardedRun next = sharded_across(2, mode, 1, file);
    if (two || mode == ShardedUpdate::On) CHECK(next.weights == straight.weights);  // sharded again: the same sums
    else CHECK(max_diff(next.weights, straight.weights) < 2e-4f);
  }
  if (rank_is_last()) std::filesystem::remove(file);
}

TEST_CASE("tensor parallel across workers with ZeRO 1 and compression: the compressed unsharded update's weights") {
  using strata::ShardedUpdate;
  const int W = workers();
  for (int local : {2, 4}) {
    INFO(W, " workers x ", local, " replicas, T = 2, bf16");
    const ShardedRun off = sharded_across(local, ShardedUpdate::Off, 2, {}, {}, strata::Compression::BF16);
    const ShardedRun on = sharded_across(local, ShardedUpdate::On, 2, {}, {}, strata::Compression::BF16);
    CHECK(on.choice.find("rounded to bf16 for the reduce-scatter") != std::string::npos);
    if (W == 2) {  // the local sum rounded, then a + b: as the compressed all-reduce adds
      CHECK(on.weights == off.weights);
      CHECK(on.state == off.state);
    } else {
      CHECK(max_diff(on.weights, off.weights) < 2e-2f);  // MPI rounds per step of its own orders
    }
    CHECK(chiefs(on.weights) == on.weights);
    CHECK(on.weights != sharded_across(local, ShardedUpdate::On).weights);  // rounded: not FP32's bits
  }
}

TEST_CASE("tensor parallel across workers with ZeRO 1: save_checkpoint by the chief alone fails on every worker, saying why") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), strata_test::quick_workers(5s)};
  if (s.num_workers() < 2) return;
  s.executor_options().tensor_parallel = 2;
  s.executor_options().sharded_update = strata::ShardedUpdate::On;
  const Tokens d;
  auto model = s.scope([] { return gpt(); });
  model.compile(nn::Adam{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  auto ds = s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12));
  model.fit(ds, {.epochs = 1, .verbose = nn::Verbosity::Silent});
  strata_test::check_chief_saving_alone(s, model, ds, "/tmp/strata_mpi_tp_zero1_chief_alone.ckpt");
}

TEST_CASE("tensor parallel across workers: T must divide every worker's replicas; every worker refuses alike") {
  const int W = workers();
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(rank_is_last() ? 1 : 2), strata_test::quick_workers()};
  s.executor_options().tensor_parallel = 2;
  try {
    train(s);
    FAIL_CHECK("no error");
  } catch (const strata::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("tensor_parallel = 2 does not divide the 1 replicas of worker " + std::to_string(W - 1)) !=
          std::string::npos);
    CHECK(msg.find("per worker") != std::string::npos);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("tensor parallel across workers: a replica failing mid-step brings every worker down with its message") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), strata_test::quick_workers(10s)};
  s.executor_options().tensor_parallel = 2;
  const Tokens d;
  auto model = s.scope([] { return gpt(); });
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 1});
  const int last = s.num_replicas_in_sync() - 1;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (const auto& b : s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)))
      model.train_step(b, [&](strata::ReplicaGradient& g) {
        if (g.replica == last) throw std::runtime_error("replica " + std::to_string(last) + " gave up");
      });
    FAIL_CHECK("no error");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("replica " + std::to_string(last) + " gave up") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 8s);  // the failure is told, not waited out (10 s)
}

TEST_CASE("tensor_parallel by name under mpirun: a worker per rank, T replicas each by default") {
  strata::StrategyChoice c;
  c.tensor_parallel = 2;
  strata::with_mpi_strategy("tensor_parallel", c, [&](auto& s) {
    using S = std::remove_cvref_t<decltype(s)>;
    if constexpr (std::is_same_v<S, strata::MultiWorkerMirroredStrategy>) {
      CHECK(s.num_local_replicas() == 2);
      CHECK(s.num_workers() == workers());
      CHECK(s.executor_options().tensor_parallel == 2);
    } else {
      FAIL_CHECK("not a MultiWorkerMirroredStrategy under mpirun");
    }
    return 0;
  });
}

}  // namespace tensor_parallel_mpi_test
