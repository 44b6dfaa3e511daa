// CompileOptions::steps_per_execution (Keras' option; issue 25's "replicas
// that run their own steps"): N steps run as one execution, the synchronous
// replicas taking each next batch themselves in one run, the batch hooks
// once per execution. Pinned here: the same weights, logs, evaluation and
// predictions bit for bit as one step at a time under every strategy and
// backend (N not dividing the batches, steps_per_epoch cutting an
// execution); the hooks' indices and batches_ended(); ModelCheckpoint's,
// TensorBoard's and BackupAndRestore's step counts across executions, and a
// resume from a checkpoint written between executions; a skipped step, a run
// of skipped steps stopping fit, a failing step and a stalled replica inside
// an execution, each as at N = 1.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "support/boom_layer.hpp"
#include "support/checkpoint_files.hpp"
#include "device/host_as_gpu.hpp"
#include "support/identity_layer.hpp"
#include "strategy/strategy_sweep.hpp"
#include "support/watchdog.hpp"

namespace steps_per_execution_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::Tensor;
using strata_test::Blobs;
using strata_test::blobs;

namespace {

struct Run {
  std::vector<float> w;
  std::vector<std::vector<double>> losses;  // per epoch: loss, accuracy
  std::int64_t iterations = 0;
  double eval_loss = 0;
  std::vector<float> predicted;
};

//! blobs_mlp under `s` (Adam, seed 7), fitted on 80 rows in batches of 8
//! (10 steps an epoch) with `n` steps to an execution; then evaluated and
//! predicting, also n to an execution.
template <class S>
Run fit_with(S& s, std::size_t n, nn::FitOptions opts = {.epochs = 2}, const Blobs& data = blobs(80, 11)) {
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 7, .steps_per_execution = n});
  opts.verbose = nn::Verbosity::Silent;
  Run r;
  const nn::History h = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(8)), opts);
  for (const auto& e : h.epochs()) r.losses.push_back({e.at("loss"), e.at("accuracy")});
  r.w = strata_test::flat_weights(model);
  r.iterations = model.iterations();
  const Blobs other = blobs(40, 12);
  r.eval_loss = model.evaluate(s.distribute(strata::data::from_tensor_slices(other.x, other.y).batch(6))).at("loss");
  const Tensor<float> p = model.predict(strata::data::from_tensor_slices(other.x).batch(7));
  r.predicted.assign(p.begin(), p.end());
  return r;
}

//! What a callback saw: each on_batch_begin's index, each on_batch_end's
//! index and batches_ended().
struct Seen final : nn::Callback {
  std::vector<int> begins, ends;
  std::vector<std::size_t> ended;
  void on_batch_begin(int b) override { begins.push_back(b); }
  void on_batch_end(int b, const nn::Logs&) override {
    ends.push_back(b);
    ended.push_back(batches_ended());
  }
};

}  // namespace

TEST_CASE("steps_per_execution gives one step at a time's weights, logs, evaluation and predictions, bit for bit, under every strategy and backend") {
  strata_test::Watchdog dog("steps_per_execution sweep", 600s);
  strata_test::for_each_strategy_and_backend(
      {.synchronous = true}, [](auto& s, const strata::StrategyInfo&, strata_test::Backend) {
        const Run one = fit_with(s, 1);
        for (std::size_t n : {4u, 10u, 64u}) {  // 10 batches an epoch: 4 leaves an execution of 2
          CAPTURE(n);
          const Run got = fit_with(s, n);
          CHECK(got.iterations == 20);
          CHECK(got.w == one.w);
          CHECK(got.losses == one.losses);
          CHECK(got.eval_loss == one.eval_loss);
          CHECK(got.predicted == one.predicted);
        }
        // steps_per_epoch 7 cuts the second execution of 4 at 3
        const Run cut1 = fit_with(s, 1, {.epochs = 2, .steps_per_epoch = 7});
        const Run cut4 = fit_with(s, 4, {.epochs = 2, .steps_per_epoch = 7});
        CHECK(cut4.iterations == 14);
        CHECK(cut4.w == cut1.w);
        CHECK(cut4.losses == cut1.losses);
      });
}

TEST_CASE("tensor parallelism (equal to one replica within rounding) gives its own one step at a time's bits") {
  strata_test::Watchdog dog("steps_per_execution tensor_parallel", 300s);
  strata::with_strategy("tensor_parallel", strata_test::small_choice(2), [](auto& s) {
    const Run one = fit_with(s, 1);
    const Run four = fit_with(s, 4);
    CHECK(four.iterations == 20);
    CHECK(four.w == one.w);
    CHECK(four.losses == one.losses);
    CHECK(four.eval_loss == one.eval_loss);
    CHECK(four.predicted == one.predicted);
  });
}

TEST_CASE("the batch hooks run once per execution: the first batch's index, the last's, batches_ended") {
  strata_test::Watchdog dog("hooks per execution", 300s);
  // every strategy of the catalogue, the parameter server and the pipeline included
  strata_test::for_each_strategy({}, [](auto& s, const strata::StrategyInfo& info) {
    Seen seen;
    const Run r = fit_with(s, 4, {.epochs = 1, .callbacks = {&seen}});
    CAPTURE(std::string(info.name));
    CHECK(r.iterations == 10);
    CHECK(seen.begins == std::vector<int>{0, 4, 8});
    CHECK(seen.ends == std::vector<int>{3, 7, 9});
    CHECK(seen.ended == std::vector<std::size_t>{4, 4, 2});
  });
  // one at a time: every batch, batches_ended 1
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  Seen seen;
  fit_with(s, 1, {.epochs = 1, .callbacks = {&seen}});
  CHECK(seen.ends.size() == 10);
  CHECK(seen.ended == std::vector<std::size_t>(10, 1));
}

namespace {
std::atomic<int> taken{0};  // batches the dataset handed out
//! Identity that records, at replica 0's forward of each training step, how many batches were taken by then.
class SeesTaken final : public strata_test::Identity<SeesTaken> {
 public:
  explicit SeesTaken(std::vector<int>* seen) : seen_(seen) {}
  std::string kind() const override { return "SeesTaken"; }
  void on_forward(const nn::RunInfo& info) {
    if (info.training && info.replica == 0) seen_->push_back(taken.load());
  }

 private:
  std::vector<int>* seen_;
};
}  // namespace

TEST_CASE("within an execution the replicas take each next batch themselves, one step ahead; the caller only the first") {
  const Blobs data = blobs(80, 11);
  for (std::size_t n : {1u, 4u}) {
    CAPTURE(n);
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    std::vector<int> seen;
    auto model = s.scope([&] { return nn::Sequential{nn::Input{{6}}, nn::Dense{8}, SeesTaken{&seen}, nn::Dense{3}}; });
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7, .steps_per_execution = n});
    taken = 0;
    auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(8).map([](Tensor<float> x, Tensor<std::int32_t> y) {
      ++taken;
      return std::tuple{std::move(x), std::move(y)};
    });
    model.fit(s.distribute(ds), {.verbose = nn::Verbosity::Silent});
    // one at a time: the caller takes batch k before step k; in executions of 4 (batches 0-3, 4-7, 8-9) the caller
    // takes the first, and replica 0 takes batch k + 1 as step k starts (so a prefetching pipeline keeps running ahead)
    CHECK(seen == (n == 1 ? std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10} : std::vector<int>{2, 3, 4, 4, 6, 7, 8, 8, 10, 10}));
  }
}

TEST_CASE("a batch that cannot be taken inside an execution: its own error, after the steps before it") {
  const Blobs data = blobs(80, 11);
  std::vector<std::vector<float>> w;
  for (std::size_t n : {1u, 4u}) {
    CAPTURE(n);
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    auto model = s.scope(strata_test::blobs_mlp);
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7, .steps_per_execution = n});
    int k = 0;  // batch 6 has one label too few: the feed refuses it
    auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(8).map([&k](Tensor<float> x, Tensor<std::int32_t> y) {
      if (k++ == 6) y = Tensor<std::int32_t>{{7}};
      return std::tuple{std::move(x), std::move(y)};
    });
    CHECK_THROWS_WITH_AS(model.fit(s.distribute(ds), {.verbose = nn::Verbosity::Silent}),
                         doctest::Contains("must have the same first (batch) extent"), strata::ShapeError);
    CHECK(model.iterations() == 6);  // batches 0-5 trained (with 4: replica 0 took batch 6 as step 5 started)
    w.push_back(strata_test::flat_weights(model));
  }
  CHECK(w[0] == w[1]);
}

TEST_CASE("compile refuses steps_per_execution 0") {
  auto model = strata_test::blobs_mlp();
  CHECK_THROWS_WITH_AS(model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {},
                                     {.steps_per_execution = 0}),
                       doctest::Contains("steps_per_execution must be at least 1"), strata::Error);
}

TEST_CASE("a callback that stops fit stops it at the execution's end, every step of which is applied") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  nn::LambdaCallback stop;
  stop.on_batch_end_fn = [&](int b, const nn::Logs&) { stop.stop_training = b >= 4; };
  const Run r = fit_with(s, 3, {.epochs = 2, .callbacks = {&stop}});
  CHECK(r.iterations == 6);  // executions end at batches 2 and 5
  CHECK(r.w == fit_with(s, 1, {.epochs = 1, .steps_per_epoch = 6}).w);
}

TEST_CASE("ModelCheckpoint's save_freq counts batches across executions") {
  strata_test::TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  // save_freq 3 with executions of 2: saves when 3 are reached, at the end of batches 3, 7 (counter at 4, reset),
  // as Keras' counting of batches does
  nn::ModelCheckpoint every3{(d.path / "w-{epoch}-{batch}.weights").string(), {.save_freq = 3}};
  fit_with(s, 2, {.epochs = 1, .callbacks = {&every3}});
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(d.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"w-1-4.weights", "w-1-8.weights"});
}

TEST_CASE("BackupAndRestore saves when an execution reaches a multiple of save_every_steps; a resumed run is the uninterrupted one") {
  strata_test::Watchdog dog("backup across executions", 300s);
  strata_test::TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  const Run want = fit_with(s, 1);  // 20 steps
  {
    nn::BackupAndRestore backup{d.path, {.save_every_steps = 3, .keep = 10}};
    strata_test::Crash crash{3};  // "killed" at the third execution's end (batches 8, 9), before its save
    CHECK_THROWS_AS(fit_with(s, 4, {.epochs = 2, .callbacks = {&backup, &crash}}), strata_test::Crashed);
    std::vector<std::int64_t> steps;
    for (const auto& c : backup.checkpoints()) steps.push_back(c.first);
    // executions end at steps 4 and 8: 4 passed 3, 8 passed 6 (a check of step % 3 would have saved neither)
    CHECK(steps == std::vector<std::int64_t>{4, 8});
  }
  nn::BackupAndRestore backup{d.path, {.save_every_steps = 3, .keep = 10}};
  const Run resumed = fit_with(s, 4, {.epochs = 2, .callbacks = {&backup}});  // from batch 8: executions realigned
  CHECK(backup.resumed_from() == 8);
  CHECK(resumed.iterations == 20);
  CHECK(resumed.w == want.w);
}

TEST_CASE("SIGTERM inside an execution: the execution finishes, is saved, and the rerun resumes to the same weights") {
  strata_test::Watchdog dog("preempted execution", 300s);
  strata_test::TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  const Run want = fit_with(s, 1);
  struct Term final : nn::Callback {
    void on_batch_begin(int b) override {
      if (b == 4) std::raise(SIGTERM);  // before the second execution's steps run
    }
  } term;
  {
    nn::BackupAndRestore backup{d.path, {.keep = 2}};
    CHECK_THROWS_AS(fit_with(s, 4, {.epochs = 2, .callbacks = {&backup, &term}}), nn::Preempted);
    REQUIRE(backup.checkpoints().size() == 1);
    CHECK(backup.checkpoints().front().first == 8);  // the execution under way (batches 4-7) finished
  }
  nn::BackupAndRestore backup{d.path, {.keep = 2}};
  const Run resumed = fit_with(s, 4, {.epochs = 2, .callbacks = {&backup}});
  CHECK(backup.resumed_from() == 8);
  CHECK(resumed.w == want.w);
}

TEST_CASE("a step skipped inside an execution, and a run of them stopping fit, are as at one step a time") {
  strata_test::Watchdog dog("non-finite inside an execution", 300s);
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  Blobs spoiled = blobs(80, 11);
  spoiled.x[(5 * 8 + 7) * 6] = std::numeric_limits<float>::quiet_NaN();  // batch 5: inside the second execution of 4
  const Run one = fit_with(s, 1, {.epochs = 2}, spoiled);
  const Run four = fit_with(s, 4, {.epochs = 2}, spoiled);
  CHECK(four.iterations == 18);
  CHECK(four.w == one.w);
  for (float v : four.w) REQUIRE(std::isfinite(v));
  // batches 2, 3, 4 bad in a row with max_bad_steps 3: the error names step 4 (optimizer iteration 2), whose
  // execution (batches 4-7) ran no step after it
  Blobs run = blobs(80, 11);
  for (std::size_t b : {2u, 3u, 4u}) run.x[(b * 8) * 6] = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t n : {1u, 4u}) {
    CAPTURE(n);
    auto model = s.scope(strata_test::blobs_mlp);
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7, .steps_per_execution = n});
    CHECK_THROWS_WITH_AS(model.fit(s.distribute(strata::data::from_tensor_slices(run.x, run.y).batch(8)),
                                   {.verbose = nn::Verbosity::Silent, .max_bad_steps = 3}),
                         doctest::Contains("step 4 (optimizer iteration 2)"), strata::NonFiniteError);
    CHECK(model.iterations() == 2);
  }
}

TEST_CASE("a step that fails inside an execution: the steps before it are applied and counted, as at one step a time") {
  strata_test::Watchdog dog("failure inside an execution", 300s);
  const Blobs data = blobs(80, 11);
  std::vector<std::vector<float>> w;
  for (std::size_t n : {1u, 4u}) {
    CAPTURE(n);
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    auto model = s.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{8}, strata_test::Boom{6}, nn::Dense{3}};  // fails at step 6
    });
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7, .steps_per_execution = n});
    CHECK_THROWS_WITH_AS(model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(8)),
                                   {.verbose = nn::Verbosity::Silent}),
                         doctest::Contains("boom in stage"), strata::ReplicaError);
    CHECK(model.iterations() == 6);
    w.push_back(strata_test::flat_weights(model));
  }
  CHECK(w[0] == w[1]);
}

namespace {
//! Identity, except that replica 1 sleeps `nap` in its forward of training step `at`.
class Naps final : public strata_test::Identity<Naps> {
 public:
  Naps(std::uint64_t at, std::chrono::milliseconds nap) : at_(at), nap_(nap) {}
  std::string kind() const override { return "Naps"; }
  void on_forward(const nn::RunInfo& info) {
    if (info.training && info.replica == 1 && info.step == at_) std::this_thread::sleep_for(nap_);
  }

 private:
  std::uint64_t at_;
  std::chrono::milliseconds nap_;
};
}  // namespace

TEST_CASE("a replica stalled inside an execution is named within the collectives' deadline") {
  strata_test::Watchdog dog("stall inside an execution", 60s);
  const Blobs data = blobs(80, 11);
  strata::MirroredStrategy s{strata::cpu_replicas(2), strata::CommOptions{.timeout = 1s}};
  auto model = s.scope([] { return nn::Sequential{nn::Input{{6}}, nn::Dense{8}, Naps{5, 4s}, nn::Dense{3}}; });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7, .steps_per_execution = 4});
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(8)), {.verbose = nn::Verbosity::Silent});
  } catch (const strata::ReplicaError& e) {
    what = e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(what.find("timed out after 1000 ms") != std::string::npos);
  CHECK(what.find("missing: replica 1") != std::string::npos);
  CHECK(waited < 4s + 3s);  // replica 0 gives up at the deadline; replica 1's nap ends, it is aborted: no hang
  CHECK(model.iterations() == 5);  // steps 0-4 applied; step 5 never completed
}

TEST_CASE("a replica waiting for a batch that replica 0 is stuck taking is named within the deadline") {
  // evaluation has no collective per step: replica 1 runs ahead and waits for the next batch itself
  strata_test::Watchdog dog("stuck taking a batch", 60s);
  const Blobs data = blobs(80, 11);
  strata::MirroredStrategy s{strata::cpu_replicas(2), strata::CommOptions{.timeout = 1s}};
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7, .steps_per_execution = 4});
  int k = 0;  // batch 5 (the second of the second execution, taken by replica 0 as step 4 starts) takes 3 s
  auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(8).map([&k](Tensor<float> x, Tensor<std::int32_t> y) {
    if (k++ == 5) std::this_thread::sleep_for(3s);
    return std::tuple{std::move(x), std::move(y)};
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    model.evaluate(s.distribute(ds));
  } catch (const strata::ReplicaError& e) {
    what = e.what();
  }
  CHECK(what.find("replica 1 waited 1000 ms for batch 1 of its execution") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s + 3s);  // the deadline; then replica 0's slow batch returns
}

}  // namespace steps_per_execution_test
