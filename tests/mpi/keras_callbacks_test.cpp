// The Keras callbacks across 2 MPI ranks (issue 24): every worker decides
// from the chief's epoch logs and stops at the same epoch (or batch: a loss
// not finite on one worker only stops both), the new learning rate reaches
// the optimizer on every rank (a pipeline's stages on two ranks), the chief
// alone writes files, and a run killed and resumed by BackupAndRestore
// makes the uninterrupted run's decisions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <mpi.h>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/nn/callbacks/keras_callbacks.hpp>
#include <strata/nn/callbacks/tensorboard.hpp>
#include <strata/strategy/multi_worker.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>

#include "support/blobs.hpp"
#include "support/checkpoint_files.hpp"
#include "device/host_as_gpu.hpp"
#include "support/quick_workers.hpp"

namespace nn = strata::nn;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

//! A directory both ranks use (rank 0 makes it), removed at the end.
struct SharedDir {
  std::filesystem::path path;
  SharedDir() {
    char name[64] = "/tmp/strata_kc_XXXXXX";
    if (world_rank() == 0) REQUIRE(::mkdtemp(name) != nullptr);
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
    path = name;
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (world_rank() == 0) std::filesystem::remove_all(path, ec);
  }
};

//! `v` on rank 0 and rank 1 alike (rank 1's sent to rank 0, compared there and the answer shared).
bool same_on_both(std::vector<double> v) {
  std::vector<double> other(v.size());
  if (world_rank() == 1) MPI_Send(v.data(), static_cast<int>(v.size()), MPI_DOUBLE, 0, 7, MPI_COMM_WORLD);
  int same = 1;
  if (world_rank() == 0) {
    MPI_Recv(other.data(), static_cast<int>(v.size()), MPI_DOUBLE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    same = other == v;
  }
  MPI_Bcast(&same, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return same != 0;
}

const strata_test::Blobs& data() {
  static const auto b = strata_test::blobs(96, 3);
  return b;
}
auto train_set() { return strata::data::from_tensor_slices(data().x, data().y).batch(16); }  // 6 global batches

template <class S>
nn::Sequential sgd_model(S& s, nn::LearningRate lr) {
  auto m = s.scope(strata_test::blobs_mlp);
  m.compile(nn::SGD{std::move(lr)}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
            {.seed = 7});
  return m;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("the callbacks see the chief's epoch logs on every worker") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers()};
  auto m = sgd_model(s, 0.1);
  nn::Logs l;
  l.set("loss", world_rank() == 0 ? 1.5 : 7.0);  // a value that differs between the workers
  l.set("val_loss", world_rank() == 0 ? std::nan("") : 2.0);
  nn::detail::agree_on_chiefs(m.strategy(), m.is_chief(), l);
  CHECK(l.at("loss") == 1.5);
  CHECK(std::isnan(l.at("val_loss")));
  nn::Logs fewer;  // different names on the workers: an Error on both, not a hang
  if (world_rank() == 0) fewer.set("loss", 1.0);
  CHECK_THROWS_WITH_AS(nn::detail::agree_on_chiefs(m.strategy(), m.is_chief(), fewer),
                       doctest::Contains("different values"), strata::Error);
}

TEST_CASE("EarlyStopping, ReduceLROnPlateau, ModelCheckpoint, CSVLogger: the same decisions on both ranks, the chief's files") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers()};
  SharedDir shared;
  const std::filesystem::path mine = shared.path / ("rank" + std::to_string(world_rank()));
  auto m = sgd_model(s, 0.1);
  nn::ReduceLROnPlateau plateau{{.monitor = "val_loss", .factor = 0.5, .patience = 1, .min_delta = 10.0}};
  nn::EarlyStopping stop{{.monitor = "val_loss", .min_delta = 10.0, .patience = 3, .restore_best_weights = true}};
  nn::ModelCheckpoint ckpt{(mine / "w-{epoch:02d}.weights").string()};
  nn::CSVLogger csv{mine / "log.csv"};
  nn::TensorBoard tb{mine / "tb"};  // the chief from fit's model
  std::vector<float> epoch0;
  nn::LambdaCallback look;
  look.on_epoch_end_fn = [&](int e, const nn::Logs&) {
    if (e == 0) epoch0 = strata_test::flat_weights(m);
  };
  std::filesystem::create_directories(mine);
  const auto h = m.fit(s.distribute(train_set()),
                       {.epochs = 10, .verbose = nn::Verbosity::Silent, .callbacks = {&look, &plateau, &stop, &ckpt, &csv, &tb}},
                       s.distribute(train_set()));
  CHECK(h.epochs().size() == 4);
  CHECK(stop.stopped_epoch() == 3);
  const float rate = m.optimizer().learning_rate()->override_rate().value_or(0.f);
  CHECK(rate == 0.1f * 0.5f * 0.5f * 0.5f);  // cut at epochs 1, 2, 3
  CHECK(same_on_both({static_cast<double>(rate), static_cast<double>(stop.stopped_epoch()), h.at("val_loss").back()}));
  CHECK(strata_test::flat_weights(m) == epoch0);
  if (world_rank() == 0) {
    CHECK(std::filesystem::exists(mine / "w-04.weights"));
    CHECK(std::filesystem::exists(tb.train_file()));
    const std::string rows = read_all(mine / "log.csv");
    CHECK(std::count(rows.begin(), rows.end(), '\n') == 5);  // the header and 4 epochs
  } else {
    CHECK(std::filesystem::is_empty(mine));  // the chief alone writes
  }
}

TEST_CASE("TerminateOnNaN: a loss not finite on one worker stops both after the same batch") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers()};
  auto x = data().x;
  for (std::size_t r = 16 * 2 + 8; r < 16 * 3; ++r)  // the second half of global batch 2: one worker's share
    for (std::size_t j = 0; j < 6; ++j) x[r * 6 + j] = std::nanf("");
  auto m = sgd_model(s, 0.1);
  nn::TerminateOnNaN nan_stop;
  int batches = 0;
  nn::LambdaCallback count;
  count.on_batch_end_fn = [&](int, const nn::Logs&) { ++batches; };
  m.fit(s.distribute(strata::data::from_tensor_slices(x, data().y).batch(16)),
        {.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = {&count, &nan_stop}});
  REQUIRE(nan_stop.terminated_at());
  CHECK(*nan_stop.terminated_at() == std::pair{0, 2});
  CHECK(batches == 3);
}

TEST_CASE("ReduceLROnPlateau reaches a pipeline's stages on both ranks: the steps of a schedule's rate") {
  const auto run = [](nn::LearningRate lr, std::vector<nn::Callback*> cbs) {
    strata::MultiWorkerPipelineStrategy s{strata_test::quick_workers().mpi};
    s.pipeline_options().micro_batches = 2;
    auto m = sgd_model(s, std::move(lr));
    const auto h = m.fit(s.distribute(train_set()), {.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = cbs});
    CHECK(h.at("loss")[0] > 0.5);  // the chief's (first stage's) logs are the model's, not a stage's zeros
    return strata_test::flat_weights(m);
  };
  const auto want = run(nn::PiecewiseConstantDecay{{11}, {0.1f, 0.05f}}, {});  // halved from epoch 2
  nn::ReduceLROnPlateau plateau{{.monitor = "loss", .factor = 0.5, .patience = 1, .min_delta = 10.0}};
  CHECK(run(0.1, {&plateau}) == want);
  CHECK(run(0.1, {}) != want);
}

namespace {
using strata_test::Crashed;
struct CrashAtEpochEnd final : nn::Callback {
  int epoch;
  explicit CrashAtEpochEnd(int e) : epoch(e) {}
  void on_epoch_end(int e, const nn::Logs&) override {
    if (e == epoch) throw Crashed{};
  }
};
}  // namespace

// The logging callbacks with GPU replicas across workers (stand-ins, tests/device/host_as_gpu.hpp): they run on the
// host, on fit's logs, so the CPU workers' rows and decisions; the chief alone writes.
TEST_CASE("GPU replicas across workers (stand-ins): CSVLogger's rows, EarlyStopping's and ReduceLROnPlateau's "
          "decisions are the CPU workers'; TensorBoard writes on the chief") {
  struct Run {
    std::string csv;
    int stopped;
    float rate;
    bool events;
  };
  const auto run = [&](auto& s, const std::filesystem::path& dir) {
    nn::CSVLogger csv{dir / "log.csv"};
    nn::ReduceLROnPlateau plateau{{.monitor = "loss", .factor = 0.5, .patience = 1, .min_delta = 10.0}};
    nn::EarlyStopping stop{{.monitor = "loss", .min_delta = 10.0, .patience = 3}};
    auto m = sgd_model(s, 0.1);
    nn::TensorBoard tb{m, dir / "tb"};
    m.fit(s.distribute(train_set()),
          {.epochs = 6, .verbose = nn::Verbosity::Silent, .callbacks = {&plateau, &csv, &stop, &tb}});
    MPI_Barrier(MPI_COMM_WORLD);
    return Run{world_rank() == 0 ? read_all(dir / "log.csv") : std::string(), stop.stopped_epoch(),
               m.optimizer().learning_rate()->override_rate().value_or(0.f),
               std::filesystem::exists(tb.train_file()) && std::filesystem::file_size(tb.train_file()) > 0};
  };
  SharedDir a, b;
  strata::MultiWorkerMirroredStrategy cpus{strata::cpu_replicas(1), strata_test::quick_workers()};
  const Run want = run(cpus, a.path);
  strata_test::HostAsGpu host;
  strata::MultiWorkerMirroredStrategy gpus{strata::virtual_gpus(0, 1), strata_test::quick_workers()};
  const Run got = run(gpus, b.path);
  CHECK(want.stopped == 3);
  CHECK(got.stopped == want.stopped);
  CHECK(got.rate == want.rate);
  CHECK(got.csv == want.csv);
  CHECK(got.events == (world_rank() == 0));
  if (world_rank() == 0) CHECK(got.csv.find("\n3,") != std::string::npos);  // rows of epochs 0 to 3
}

TEST_CASE("BackupAndRestore across workers: the resumed run makes the uninterrupted run's decisions") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers()};
  struct Run {
    std::vector<float> weights;
    std::string csv;
    int stopped;
    float rate;
  };
  const auto run = [&](const std::filesystem::path& dir, bool crash) {
    nn::BackupAndRestore backup{dir / "backup", {.keep = 1}};
    nn::ReduceLROnPlateau plateau{{.monitor = "loss", .factor = 0.5, .patience = 2, .min_delta = 10.0}};
    nn::EarlyStopping stop{{.monitor = "loss", .min_delta = 10.0, .patience = 4, .restore_best_weights = true}};
    nn::CSVLogger csv{dir / "log.csv"};
    CrashAtEpochEnd kill{crash ? 3 : -1};
    const nn::FitOptions opts{.epochs = 8, .verbose = nn::Verbosity::Silent,
                              .callbacks = {&backup, &plateau, &csv, &stop, &kill}};
    if (crash) {
      auto m = sgd_model(s, 0.1);
      CHECK_THROWS_AS(m.fit(s.distribute(train_set()), opts), Crashed);
      kill.epoch = -1;
    }
    auto m = sgd_model(s, 0.1);
    m.fit(s.distribute(train_set()), opts);
    if (crash) CHECK(backup.resumed_from() == 18);  // epoch 2's end: 6 global batches an epoch
    MPI_Barrier(MPI_COMM_WORLD);
    return Run{strata_test::flat_weights(m), world_rank() == 0 ? read_all(dir / "log.csv") : std::string(),
               stop.stopped_epoch(), m.optimizer().learning_rate()->override_rate().value_or(0.f)};
  };
  SharedDir a, b;
  const Run want = run(a.path, false);
  const Run got = run(b.path, true);
  CHECK(want.stopped == 4);
  CHECK(got.stopped == want.stopped);
  CHECK(got.rate == want.rate);
  CHECK(got.csv == want.csv);
  CHECK(got.weights == want.weights);
  CHECK(same_on_both({static_cast<double>(got.rate), static_cast<double>(got.stopped)}));
}

TEST_CASE("BackupAndRestore across workers: a run killed mid-epoch twice writes the uninterrupted run's CSV; "
          "a CSV history gone from the chief is refused on both ranks before the first step") {
  // 6 global batches an epoch, a checkpoint every 2 steps: killed at step 5 (resumes from 4, inside epoch 0:
  // each worker's running sums come back from the checkpoint), then at step 9 (after the resumed run's row)
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers()};
  const auto run = [&](const std::filesystem::path& dir, std::int64_t crash_at, bool expect_refusal = false) {
    nn::BackupAndRestore backup{dir / "backup", {.save_every_steps = 2}};
    nn::CSVLogger csv{dir / "log.csv"};
    strata_test::StopAtStep kill{crash_at, /*term=*/false};  // throws on every rank: a kill, as far as fit can tell
    auto m = sgd_model(s, 0.1);
    const nn::FitOptions opts{.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = {&backup, &csv, &kill}};
    if (expect_refusal) {
      CHECK_THROWS_AS(m.fit(s.distribute(train_set().shuffle(96, 5)), opts), nn::CheckpointDirectoryError);
      CHECK(m.iterations() == 8);  // the checkpoint's step (loaded), and no step further
    } else if (crash_at > 0) {
      CHECK_THROWS_AS(m.fit(s.distribute(train_set().shuffle(96, 5)), opts), strata_test::Crashed);
    } else {
      m.fit(s.distribute(train_set().shuffle(96, 5)), opts);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return strata_test::flat_weights(m);
  };
  SharedDir a, b;
  const auto want = run(a.path, -1);
  run(b.path, 5);
  run(b.path, 9);
  std::string kept;
  if (world_rank() == 0) {
    kept = read_all(b.path / "log.csv");
    std::filesystem::rename(b.path / "log.csv", b.path / "moved.csv");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  run(b.path, -1, true);
  if (world_rank() == 0) std::filesystem::rename(b.path / "moved.csv", b.path / "log.csv");
  MPI_Barrier(MPI_COMM_WORLD);
  const auto got = run(b.path, -1);
  CHECK(got == want);
  if (world_rank() == 0) {
    CHECK(!kept.empty());
    CHECK(read_all(b.path / "log.csv") == read_all(a.path / "log.csv"));
  }
}
