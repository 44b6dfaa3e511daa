// ZeRO stages 1, 2 and 3 across workers (issue 25), under mpirun -np 2 and -np 3:
// MultiWorkerMirroredStrategy shards the optimizer state, (stages 2, 3) the
// gradient and (stage 3) the values over every replica of every worker, with
// one to three replicas a worker. Pinned here: the weights and the joined optimizer state
// are stage 0's bit for bit between two workers (within rounding at three,
// where MPI's reduce-scatter and the all-reduce may add in other orders);
// evaluation and predictions through gathered layers; a checkpoint written
// at stage 3 (every worker joining its shards, the chief writing, also from
// ModelCheckpoint during fit) resumes at stage 0 and in one process; each
// replica holds 1/p of the job's state; a worker stalled in its forward is
// named by the others within the deadline; a save_checkpoint the chief
// alone calls fails on every worker instead of hanging.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/nn.hpp>
#include <strata/parallel/zero/fully_sharded.hpp>
#include <strata/strategy/multi_worker.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "chief_saving_alone.hpp"
#include "support/identity_layer.hpp"
#include "support/max_diff.hpp"
#include "support/quick_workers.hpp"

namespace mpi_fully_sharded_test {  // each test file in its own namespace: a unity build joins them

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::ShardedUpdate;

namespace {

//! The identity; sleeps `ms` in forward on worker `worker`'s first replica from training step `after`.
class Stalls final : public strata_test::Identity<Stalls> {
 public:
  Stalls(int worker, int ms, int after) : worker_(worker), ms_(ms), after_(after) {}
  [[nodiscard]] std::string kind() const override { return "Stalls"; }
  void on_forward(const nn::RunInfo& info) {
    if (info.training && info.replica == worker_ && info.step >= static_cast<std::uint64_t>(after_))
      std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  }

 private:
  int worker_, ms_, after_;
};

//! Four layers with parameters (112 | 136 | 99 | 36 floats: not divisible by 2, 3 or 4 replicas), L2 on two.
nn::Sequential model() {
  return nn::Sequential{nn::Input{{6}},
                        nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::Dense{8, {.l2 = 2e-3f}},
                        nn::ReLU{},
                        nn::Dense{11, {.activation = nn::Activation::Tanh}},
                        nn::Dense{3}};
}

std::filesystem::path temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("strata_mpi_fully_sharded_" + name);
}

std::vector<float> values(const strata::Tensor<float>& t) { return {t.data(), t.data() + t.size()}; }

using strata_test::max_diff;

struct Trained {
  std::vector<float> weights;
  std::vector<std::vector<float>> state;  // the optimizer's slots, joined
  double eval_loss = 0;
  std::vector<float> predictions;
  std::string choice;
};

//! 3 epochs of Adam (the gradient clipped to global norm 1) on blobs, the same data on every worker, batches
//! of 10 (rows not divisible by the replicas); `local` replicas a worker (CPUs, or virtual GPUs) at `mode`; then
//! the state read on every worker (collective where it is sharded), a checkpoint written by the chief.
//! `bytes`: the layers' reduce-scatters by buckets of that size (ExecutorOptions::bucket_bytes).
Trained train(int local, ShardedUpdate mode, const std::filesystem::path& save = {}, std::size_t per_execution = 1,
              bool gpus = false, std::size_t bytes = 0) {
  strata::MultiWorkerMirroredStrategy s{gpus ? strata::virtual_gpus(0, local) : strata::cpu_replicas(local),
                                        strata_test::quick_workers(20s)};
  s.executor_options().sharded_update = mode;
  s.executor_options().bucket_bytes = bytes;
  const auto data = strata_test::blobs(90, 11);
  auto m = s.scope(model);
  m.compile(nn::Adam{0.01, {.global_clipnorm = 1.f}}, nn::SparseCategoricalCrossentropy{{.from_logits = true}},
            {nn::Accuracy{}}, {.seed = 7, .steps_per_execution = per_execution});
  m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(10)),
        {.epochs = 3, .verbose = nn::Verbosity::Silent});
  Trained t;
  t.weights = strata_test::flat_weights(m);
  t.eval_loss = m.evaluate(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16))).at("loss");
  const auto pred = m.predict(data.x, 7);
  t.predictions.assign(pred.data(), pred.data() + pred.size());
  t.choice = m.gradient_reduction();
  if (!save.empty()) m.save_checkpoint(save);  // every worker: the state is joined over them
  return t;
}

std::vector<std::vector<float>> optimizer_slots(const std::filesystem::path& path) {
  std::vector<std::vector<float>> out;
  for (const auto& e : strata::io::read_tensor_file(path, "test").tensors)
    if (e.name.rfind("optimizer/", 0) == 0) out.push_back(values(e.value));
  return out;
}

//! strata_test::epoch_saved_epoch (blobs.hpp: an epoch, a checkpoint saved or loaded, an epoch more) across
//! workers of `local` replicas at `mode`. The weights; `workers`: the job's count.
std::vector<float> epoch_saved_epoch(int local, ShardedUpdate mode, const std::filesystem::path& path, bool save,
                                     bool load, int* workers = nullptr) {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(local), strata_test::quick_workers(20s)};
  if (workers) *workers = s.num_workers();
  s.executor_options().sharded_update = mode;
  return strata_test::epoch_saved_epoch(s, model, path, save, load);  // (blobs.hpp)
}

//! t's weights, evaluation and predictions are want's: bit for bit between two workers (every sum a + b),
//! else within the reduction orders' rounding.
void check_outputs(const Trained& t, const Trained& want, bool two) {
  if (two) {
    CHECK(t.weights == want.weights);
    CHECK(t.eval_loss == want.eval_loss);
    CHECK(t.predictions == want.predictions);
  } else {
    CHECK(max_diff(t.weights, want.weights) < 1e-5f);
    CHECK(std::abs(t.eval_loss - want.eval_loss) < 1e-5);
    CHECK(max_diff(t.predictions, want.predictions) < 1e-4f);
  }
}

}  // namespace

TEST_CASE("ZeRO 2 and 3 across workers: stage 0's weights, optimizer state, evaluation and predictions") {
  strata::MultiWorkerMirroredStrategy probe{strata::cpu_replicas(1), strata_test::quick_workers(20s)};
  const int workers = probe.num_workers();
  const bool two = workers == 2;  // between two workers every sum is a + b, whichever collective adds it
  for (int local : {1, 2}) {
    CAPTURE(local);
    const auto path0 = temp("zero0_" + std::to_string(local) + ".ckpt");
    const Trained zero0 = train(local, ShardedUpdate::Off, path0);
    for (ShardedUpdate mode : {ShardedUpdate::Gradients, ShardedUpdate::Parameters}) {
      CAPTURE(static_cast<int>(mode));
      const auto path = temp("zero_" + std::to_string(local) + ".ckpt");
      const Trained t = train(local, mode, path);
      CHECK(t.choice.find(mode == ShardedUpdate::Gradients ? "ZeRO stage 2" : "ZeRO stage 3") != std::string::npos);
      CHECK(t.choice.find("every worker's replicas") != std::string::npos);
      check_outputs(t, zero0, two);
      if (probe.is_chief()) {  // the chief's file holds every worker's shards, joined
        const auto slots = optimizer_slots(path), slots0 = optimizer_slots(path0);
        REQUIRE(slots.size() == 2);  // Adam's moments
        REQUIRE(slots0.size() == 2);
        for (std::size_t k = 0; k < 2; ++k) {
          if (two) CHECK(slots[k] == slots0[k]);
          else CHECK(max_diff(slots[k], slots0[k]) < 1e-5f);
        }
        std::filesystem::remove(path);
      }
    }
    probe.communicator().barrier();  // the others' runs are over before the chief removes the file
    if (probe.is_chief()) std::filesystem::remove(path0);
  }
}

// ZeRO 2 and 3 by buckets across workers: a bucket's blocks, each a replica's slices of the bucket's layers
// padded to the largest, reduce-scattered in one call over every worker's replicas (and stage 2's updated
// slices all-gathered the same way); between two workers every sum is a + b: the per-layer run's bits.
TEST_CASE("ZeRO 2 and 3 across workers by buckets: the per-layer run's weights, state and outputs") {
  strata::MultiWorkerMirroredStrategy probe{strata::cpu_replicas(1), strata_test::quick_workers(20s)};
  const bool two = probe.num_workers() == 2;
  for (int local : {1, 2})
    for (ShardedUpdate mode : {ShardedUpdate::Gradients, ShardedUpdate::Parameters}) {
      INFO(local, " replicas a worker, mode ", static_cast<int>(mode));
      const auto flat_path = temp("flat.ckpt");
      const Trained flat = train(local, mode, flat_path);
      for (std::size_t bytes : {std::size_t{1}, std::size_t{400}, std::size_t{1} << 20}) {
        INFO("bucket bytes ", bytes);
        const auto path = temp("buckets.ckpt");
        const Trained t = train(local, mode, path, 1, false, bytes);
        CHECK_MESSAGE(t.choice.find(" of whole layers (") != std::string::npos, t.choice);
        check_outputs(t, flat, two);
        if (probe.is_chief()) {
          const auto slots = optimizer_slots(path), slots0 = optimizer_slots(flat_path);
          REQUIRE(slots.size() == 2);
          for (std::size_t k = 0; k < 2; ++k) {
            if (two) CHECK(slots[k] == slots0[k]);
            else CHECK(max_diff(slots[k], slots0[k]) < 1e-5f);
          }
        }
        probe.communicator().barrier();
        if (probe.is_chief()) std::filesystem::remove(path);
      }
      if (probe.is_chief()) std::filesystem::remove(flat_path);
    }
  // GPU replicas across workers (staged through host memory) by buckets: the CPU replicas' bits
  strata_test::HostAsGpu host;
  const Trained cpu = train(1, ShardedUpdate::Gradients, {}, 1, false, 400);
  const Trained gpu = train(1, ShardedUpdate::Gradients, {}, 1, true, 400);
  CHECK(gpu.weights == cpu.weights);
  CHECK(gpu.predictions == cpu.predictions);
}

// Workers that run different numbers of replicas cannot cut a bucket as the context does: each layer's
// reduce-scatter on its own, and the summary says why.
TEST_CASE("ZeRO 2 buckets across workers of different replica counts: per layer, said") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(rank == 0 ? 2 : 1), strata_test::quick_workers(20s)};
  s.executor_options().sharded_update = ShardedUpdate::Gradients;
  s.executor_options().bucket_bytes = 400;
  const auto data = strata_test::blobs(60, 11);
  auto m = s.scope(model);
  m.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(12)),
        {.epochs = 1, .verbose = nn::Verbosity::Silent});
  const std::string choice = m.gradient_reduction();
  CHECK_MESSAGE(choice.find("not by buckets (the workers run different numbers of replicas)") != std::string::npos,
                choice);
}

// ZeRO 1 across workers (ShardedUpdate::On): the optimizer state sharded over every worker's replicas (each a
// slice of the flat parameters: its worker's block, cut among the worker's replicas); the gradient reduce-
// scattered after backward, each slice updated, the slices all-gathered.
TEST_CASE("ZeRO 1 across workers: stage 0's weights, optimizer state, evaluation and predictions; a checkpoint resumes") {
  strata::MultiWorkerMirroredStrategy probe{strata::cpu_replicas(1), strata_test::quick_workers(20s)};
  const bool two = probe.num_workers() == 2;
  for (int local : {1, 2, 3}) {
    CAPTURE(local);
    const auto path0 = temp("zero1_off_" + std::to_string(local) + ".ckpt"), path = temp("zero1_" + std::to_string(local) + ".ckpt");
    const Trained zero0 = train(local, ShardedUpdate::Off, path0), zero1 = train(local, ShardedUpdate::On, path);
    check_outputs(zero1, zero0, two);
    if (probe.is_chief()) {  // the chief's file holds every worker's slices, joined
      const auto slots = optimizer_slots(path), slots0 = optimizer_slots(path0);
      REQUIRE(slots.size() == 2);
      REQUIRE(slots0.size() == 2);
      for (std::size_t k = 0; k < 2; ++k) {
        if (two) CHECK(slots[k] == slots0[k]);
        else CHECK(max_diff(slots[k], slots0[k]) < 1e-5f);
      }
    }
    probe.communicator().barrier();
    if (probe.is_chief()) std::filesystem::remove(path0), std::filesystem::remove(path);
  }
  // one epoch at ZeRO 1, saved (collective), then a second from the file at ZeRO 1 and 0: the straight run's bits
  const auto file = temp("zero1_resume.ckpt");
  const auto straight = epoch_saved_epoch(2, ShardedUpdate::On, file, true, false);
  CHECK(epoch_saved_epoch(2, ShardedUpdate::On, file, false, true) == straight);
  if (two) CHECK(epoch_saved_epoch(2, ShardedUpdate::Off, file, false, true) == straight);
  else CHECK(max_diff(epoch_saved_epoch(2, ShardedUpdate::Off, file, false, true), straight) < 1e-5f);
  probe.communicator().barrier();
  if (probe.is_chief()) std::filesystem::remove(file);
}

// Executions of several steps (CompileOptions::steps_per_execution): each step's gathers and reduce-scatters
// queued on the progress threads one run after the other, the same bits as one step to a run.
TEST_CASE("ZeRO 3 across workers in executions of 4 steps: one step at a time's weights and state") {
  const Trained one = train(2, ShardedUpdate::Parameters);
  const Trained four = train(2, ShardedUpdate::Parameters, {}, 4);  // 9 batches an epoch: executions of 4, 4, 1
  CHECK(four.weights == one.weights);
  CHECK(four.eval_loss == one.eval_loss);
  CHECK(four.predictions == one.predictions);
}

TEST_CASE("a checkpoint of ZeRO 3 across workers resumes at ZeRO 0 across workers and in one process") {
  const auto data = strata_test::blobs(60, 5);
  const auto path = temp("resume.ckpt");
  int workers = 0;
  auto run = [&](ShardedUpdate mode, bool save, bool load) {
    return epoch_saved_epoch(1, mode, path, save, load, &workers);
  };
  const auto straight = run(ShardedUpdate::Parameters, true, false);  // epoch 1, saved, epoch 2
  const auto zero0 = run(ShardedUpdate::Off, false, true);
  const auto zero2 = run(ShardedUpdate::Gradients, false, true);
  if (workers == 2) {
    CHECK(zero0 == straight);
    CHECK(zero2 == straight);
  } else {
    CHECK(max_diff(zero0, straight) < 1e-5f);
    CHECK(max_diff(zero2, straight) < 1e-5f);
  }
  // in one process, as many replicas as the job had: the same rows per replica, the same sums (direct, in order)
  strata::MirroredStrategy one{strata::cpu_replicas(workers)};
  one.executor_options().sharded_update = ShardedUpdate::Off;
  auto m = one.scope(model);
  m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  m.build(strata::Shape{6});
  m.load_checkpoint(path);
  m.fit(one.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(12)),
        {.epochs = 1, .verbose = nn::Verbosity::Silent});
  CHECK(max_diff(strata_test::flat_weights(m), straight) < 1e-5f);
  strata::MultiWorkerMirroredStrategy end{strata::cpu_replicas(1), strata_test::quick_workers(20s)};
  end.communicator().barrier();
  if (end.is_chief()) std::filesystem::remove(path);
}

TEST_CASE("ModelCheckpoint and BackupAndRestore during fit at ZeRO 3 across workers write the joined state") {
  const auto data = strata_test::blobs(60, 5);
  const auto dir = temp("callbacks");
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), strata_test::quick_workers(20s)};
  if (s.is_chief()) std::filesystem::remove_all(dir);
  s.communicator().barrier();
  s.executor_options().sharded_update = ShardedUpdate::Parameters;
  auto m = s.scope(model);
  m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  nn::ModelCheckpoint ckpt{(dir / "epoch{epoch}.ckpt").string(), {.weights_only = false}};
  nn::BackupAndRestore backup{dir / "backup"};
  m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(12)),
        {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&ckpt, &backup}});
  CHECK(m.state_reads_collective() == (s.num_workers() > 1));
  const auto weights = strata_test::flat_weights(m);  // collective at stage 3: every worker
  s.communicator().barrier();
  if (s.is_chief()) {
    // the last epoch's file: the model's weights and every worker's shards of Adam's moments
    strata::MirroredStrategy one{strata::cpu_replicas(1)};
    auto loaded = one.scope(model);
    loaded.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    loaded.build(strata::Shape{6});
    loaded.load_checkpoint(dir / "epoch2.ckpt");
    CHECK(strata_test::flat_weights(loaded) == weights);
    const auto slots = optimizer_slots(dir / "epoch2.ckpt");
    REQUIRE(slots.size() == 2);
    for (const auto& slot : slots) {
      CHECK(slot.size() == weights.size());
      CHECK(std::any_of(slot.begin(), slot.end(), [](float v) { return v != 0.f; }));
    }
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("a per-replica memory budget counts the whole job's replicas: stage 0 refused naming a stage that fits; stage 3 trains") {
  using strata::detail::model_state_bytes;
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers(20s)};
  const auto p = static_cast<std::size_t>(s.num_replicas_in_sync());
  const std::size_t n = 112 + 136 + 99 + 36;
  const strata::detail::ShardLayout layout({112, 136, 99, 36}, std::vector<std::size_t>(p, 1));
  const std::size_t stage3 = model_state_bytes(3, n, p, 2, layout.window_pair());
  REQUIRE(stage3 < model_state_bytes(0, n, p, 2, layout.window_pair()));
  REQUIRE(stage3 < model_state_bytes(3, n, 1, 2, layout.window_pair()));  // one replica alone would not fit
  // every replica's slice of every layer is its share of the job's: the layout over all workers' replicas
  std::size_t owned = 0;
  for (std::size_t r = 0; r < p; ++r) {
    CHECK(layout.owned(r) <= (n + p - 1) / p + 4);  // a slice of each of the 4 layers, rounded up at most
    owned += layout.owned(r);
  }
  CHECK(owned == n);
  const auto data = strata_test::blobs(40, 5);
  auto make = [&](ShardedUpdate mode) {
    s.executor_options().sharded_update = mode;
    s.executor_options().memory_budget_bytes = stage3;
    auto m = s.scope(model);
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(10)),
          {.epochs = 1, .verbose = nn::Verbosity::Silent});
    return strata_test::flat_weights(m).size();
  };
  // stage 1, 2 or 3, whichever is the first that fits over every worker's replicas
  CHECK_THROWS_WITH_AS(make(ShardedUpdate::Off), doctest::Contains("would fit"), strata::Error);
  CHECK(make(ShardedUpdate::Parameters) == n);
}

// GPU replicas across workers (on the host's compute here) shard too: each stages its gradient (ZeRO 1), or
// each layer's gradient and values (ZeRO 2, 3), through host memory to the replica context's reduce-scatter
// and all-gather over every worker's replicas: the CPU replicas' very sums, so their bits.
TEST_CASE("GPU replicas across workers shard at ZeRO 1, 2 and 3: the CPU replicas' weights, state and outputs") {
  strata::MultiWorkerMirroredStrategy probe{strata::cpu_replicas(1), strata_test::quick_workers(20s)};
  for (int local : {1, 2}) {
    for (ShardedUpdate mode : {ShardedUpdate::On, ShardedUpdate::Gradients, ShardedUpdate::Parameters}) {
      INFO(local, " replicas a worker, mode ", static_cast<int>(mode));
      const auto cpu_path = temp("cpu.ckpt"), gpu_path = temp("gpu.ckpt");
      const Trained cpu = train(local, mode, cpu_path);
      strata_test::HostAsGpu host;
      const Trained gpu = train(local, mode, gpu_path, 1, /*gpus=*/true);
      CHECK(gpu.weights == cpu.weights);
      CHECK(gpu.eval_loss == cpu.eval_loss);
      CHECK(gpu.predictions == cpu.predictions);
      CHECK(gpu.choice.find("staged through host memory") != std::string::npos);
      if (probe.is_chief()) {
        const auto slots = optimizer_slots(gpu_path);
        REQUIRE(slots.size() == 2);
        CHECK(slots == optimizer_slots(cpu_path));
      }
      probe.communicator().barrier();
      if (probe.is_chief()) std::filesystem::remove(cpu_path), std::filesystem::remove(gpu_path);
    }
  }
}

TEST_CASE("a worker stalled in its forward while the others wait in a parameter gather is named within the deadline") {
  strata::MultiWorkerMirroredStrategy probe{strata::cpu_replicas(1), strata_test::quick_workers(20s)};
  // GPU replicas across workers: their gathers staged through the same context; by buckets (a bucket a
  // layer): the others wait in a bucket's gather
  for (const auto& run : {std::pair{false, std::size_t{0}}, std::pair{true, std::size_t{0}},
                          std::pair{false, std::size_t{1}}, std::pair{true, std::size_t{1}}}) {
    const bool gpus = run.first;  // (no structured binding: clang 14 cannot capture one in doctest's lambdas)
    const std::size_t bytes = run.second;
    INFO((gpus ? "GPU replicas" : "CPU replicas"), ", bucket bytes ", bytes);
    probe.communicator().barrier();  // worker 1 is out of its stall before the next strategy is made
    std::optional<strata_test::HostAsGpu> host;
    if (gpus) host.emplace();
    strata::MultiWorkerMirroredStrategy s{gpus ? strata::virtual_gpus(0, 1) : strata::cpu_replicas(1),
                                          strata_test::quick_workers(2s)};
    s.executor_options().sharded_update = ShardedUpdate::Parameters;
    s.executor_options().bucket_bytes = bytes;
    const auto data = strata_test::blobs(60, 3);
    auto m = s.scope([] {  // worker 1 stalls 6 s in its third step, between two layers' gathers
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16}, Stalls{1, 6000, 2}, nn::Dense{8}, nn::Dense{3}};
    });
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
      m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(12)),
            {.epochs = 1, .verbose = nn::Verbosity::Silent});
    } catch (const strata::Error& e) {
      what = e.what();
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    INFO("worker ", s.worker_index(), ": ", what);
    CHECK(!what.empty());
    if (s.worker_index() != 1) {
      CHECK(what.find("rank 1") != std::string::npos);
      CHECK(took < 5s);  // the 2 s deadline (and its notice), not worker 1's 6 s stall
    }
  }
}

TEST_CASE("save_checkpoint called by the chief alone under sharded state (ZeRO 2, ZeRO 1) fails on every worker, naming why") {
  for (ShardedUpdate mode : {ShardedUpdate::Gradients, ShardedUpdate::On}) {
    CAPTURE(static_cast<int>(mode));
    strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers(5s)};
    if (s.num_workers() < 2) return;
    s.executor_options().sharded_update = mode;
    const auto data = strata_test::blobs(40, 5);
    auto m = s.scope(model);
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    auto ds = s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(10));
    m.fit(ds, {.epochs = 1, .verbose = nn::Verbosity::Silent});
    strata_test::check_chief_saving_alone(s, m, ds, temp("chief_alone.ckpt"));
  }
}

}  // namespace mpi_fully_sharded_test
