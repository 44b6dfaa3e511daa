// The Keras callbacks (issue 24): EarlyStopping, ModelCheckpoint,
// CSVLogger, ReduceLROnPlateau, LearningRateScheduler, TerminateOnNaN. Their
// decisions on scripted logs (a fake model), then in real fits under every
// in-process strategy, and a run killed and resumed by BackupAndRestore that
// makes the uninterrupted run's decisions.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <strata/nn.hpp>
#include <strata/nn/callbacks/keras_callbacks.hpp>
#include <strata/nn/callbacks/tensorboard.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "support/checkpoint_files.hpp"
#include "device/host_as_gpu.hpp"
#include "strategy/strategy_sweep.hpp"

namespace nn = strata::nn;
using strata_test::TempDir;

namespace {

//! A model for scripted runs: its weights one value, its rate a float.
struct FakeModel final : nn::ModelAccess {
  float w = 0.f;
  float lr = 0.1f;
  int saved = 0;
  bool is_chief() const override { return true; }
  std::vector<strata::io::NamedTensor> get_weights() const override {
    strata::Tensor<float> t{strata::Shape{1}};
    t[0] = w;
    return {{"w", t}};
  }
  void set_weights(const std::vector<strata::io::NamedTensor>& ws) override { w = ws.at(0).value[0]; }
  void save_weights(const std::filesystem::path&) const override {}
  void save_checkpoint(const std::filesystem::path&) override { ++saved; }
  std::int64_t iterations() const override { return 0; }
  float learning_rate() const override { return lr; }
  void set_learning_rate(float r) override { lr = r; }
  std::vector<double> from_chief(std::vector<double> v) override { return v; }
  bool any_worker(bool mine) override { return mine; }
};

nn::Logs logs_of(std::initializer_list<std::pair<const char*, double>> kv) {
  nn::Logs l;
  for (const auto& [k, v] : kv) l.set(k, v);
  return l;
}

//! Runs `cb` over the scripted `values` of `name` (the fake model's weight = the epoch); returns the epochs run.
int scripted(nn::Callback& cb, FakeModel& m, const std::vector<double>& values, const char* name = "val_loss") {
  cb.set_model(&m);
  cb.stop_training = false;
  cb.on_train_begin();
  int e = 0;
  for (; e < static_cast<int>(values.size()) && !cb.stop_training; ++e) {
    cb.on_epoch_begin(e);
    m.w = static_cast<float>(e);
    cb.on_epoch_end(e, logs_of({{name, values[static_cast<std::size_t>(e)]}}));
  }
  cb.on_train_end({});
  return e;
}

const strata_test::Blobs& data() {
  static const auto b = strata_test::blobs(96, 3);
  return b;
}
auto train_set() { return strata::data::from_tensor_slices(data().x, data().y).batch(16); }  // 6 batches

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

TEST_CASE("EarlyStopping on scripted logs: patience, min_delta, mode, baseline, the best weights") {
  FakeModel m;
  nn::EarlyStopping a{{.monitor = "val_loss", .patience = 2, .restore_best_weights = true}};
  // best at epoch 1 (0.5); epochs 2 and 3 do not improve: stops at 3, ends with epoch 1's weights
  CHECK(scripted(a, m, {1.0, 0.5, 0.6, 0.55, 0.1}) == 4);
  CHECK(a.stopped_epoch() == 3);
  CHECK(a.best_epoch() == 1);
  CHECK(m.w == 1.f);
  // min_delta: 0.45 after 0.5 is no improvement by more than 0.1
  nn::EarlyStopping b{{.monitor = "val_loss", .min_delta = 0.1, .patience = 1}};
  CHECK(scripted(b, m, {1.0, 0.5, 0.45, 0.1}) == 3);
  CHECK(b.best() == 0.5);
  // "acc" in the name: more is better (auto); Mode::Min turns it around
  nn::EarlyStopping c{{.monitor = "val_accuracy", .patience = 1}};
  CHECK(scripted(c, m, {0.5, 0.6, 0.7, 0.65}, "val_accuracy") == 4);
  nn::EarlyStopping c2{{.monitor = "val_accuracy", .patience = 1, .mode = nn::Mode::Min}};
  CHECK(scripted(c2, m, {0.5, 0.6, 0.7, 0.65}, "val_accuracy") == 2);
  // a baseline not beaten: improvements do not reset the counter (without it, no stop)
  nn::EarlyStopping d{{.monitor = "val_loss", .patience = 3, .baseline = 0.2}};
  CHECK(scripted(d, m, {1.0, 0.9, 0.95, 0.97, 0.99}) == 3);
  nn::EarlyStopping d2{{.monitor = "val_loss", .patience = 3}};
  CHECK(scripted(d2, m, {1.0, 0.9, 0.95, 0.97, 0.99}) == 5);
  // without restore_best_weights the last weights stay
  nn::EarlyStopping e{{.monitor = "val_loss", .patience = 1}};
  CHECK(scripted(e, m, {1.0, 2.0, 3.0}) == 2);
  CHECK(m.w == 1.f);
  // a missing value names what the logs have
  nn::EarlyStopping f{{.monitor = "val_loss"}};
  f.set_model(&m);
  f.on_train_begin();
  CHECK_THROWS_WITH_AS(f.on_epoch_end(0, logs_of({{"loss", 1.0}})),
                       doctest::Contains("no \"val_loss\" to monitor (they have: loss)"), strata::Error);
  CHECK_THROWS_AS(nn::EarlyStopping({.patience = -1}), strata::Error);
}

TEST_CASE("ReduceLROnPlateau on scripted logs: factor, patience, cooldown, min_lr; its state round-trips") {
  FakeModel m;
  nn::ReduceLROnPlateau r{{.monitor = "val_loss", .factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.02}};
  r.set_model(&m);
  r.on_train_begin();
  const std::vector<double> v{1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
  std::vector<float> rates;
  for (int e = 0; e < static_cast<int>(v.size()); ++e) {
    r.on_epoch_end(e, logs_of({{"val_loss", v[static_cast<std::size_t>(e)]}}));
    rates.push_back(m.lr);
  }
  // epoch 0 best; waits 1, 2 -> 0.05; cooldown ends at 3 (wait 1), 4 -> 0.025; 6 -> min_lr 0.02; 8: at min_lr
  CHECK(rates == std::vector<float>{0.1f, 0.1f, 0.05f, 0.05f, 0.025f, 0.025f, 0.02f, 0.02f, 0.02f});
  // the state: a copy that loads it decides as the original
  nn::ReduceLROnPlateau a{{.monitor = "val_loss", .patience = 3}}, b{{.monitor = "val_loss", .patience = 3}};
  a.set_model(&m), b.set_model(&m);
  a.on_train_begin(), b.on_train_begin();
  a.on_epoch_end(0, logs_of({{"val_loss", 1.0}}));
  a.on_epoch_end(1, logs_of({{"val_loss", 2.0}}));
  b.load_state(a.save_state());
  CHECK(b.wait() == 1);
  CHECK(b.best() == 1.0);
  CHECK_THROWS_AS(nn::ReduceLROnPlateau({.factor = 1.0}), strata::Error);
}

TEST_CASE("LearningRateScheduler sets each epoch's rate once, a resumed epoch's not twice") {
  FakeModel m;
  std::vector<std::pair<int, float>> calls;
  nn::LearningRateScheduler s{[&](int epoch, float lr) {
    calls.emplace_back(epoch, lr);
    return lr * 0.5f;
  }};
  s.set_model(&m);
  s.on_train_begin();
  s.on_epoch_begin(0);
  s.on_epoch_begin(1);
  CHECK(m.lr == 0.025f);
  CHECK(calls == std::vector<std::pair<int, float>>{{0, 0.1f}, {1, 0.05f}});
  nn::LearningRateScheduler again{[&](int, float lr) { return lr * 0.5f; }};
  again.set_model(&m);
  again.on_train_begin();
  again.load_state(s.save_state());
  again.on_epoch_begin(1);  // resumed inside epoch 1: its rate is set already
  CHECK(m.lr == 0.025f);
  again.on_epoch_begin(2);
  CHECK(m.lr == 0.0125f);
}

TEST_CASE("ModelCheckpoint's file-name pattern and save_best_only") {
  FakeModel m;
  TempDir d;
  nn::ModelCheckpoint c{(d.path / "ckpt-{epoch:02d}-{val_loss:.3f}.w").string()};
  CHECK(c.path_for(4, logs_of({{"val_loss", 0.12345}})) == d.path / "ckpt-05-0.123.w");
  nn::ModelCheckpoint plain{"m-{epoch}-{loss}.w"};
  CHECK(plain.path_for(0, logs_of({{"loss", 0.5}})) == "m-1-0.5.w");
  CHECK_THROWS_WITH_AS(nn::ModelCheckpoint("a-{epoch:q}.w"), doctest::Contains("{epoch:q}"), strata::Error);
  CHECK_THROWS_AS(nn::ModelCheckpoint("a-{epoch.w"), strata::Error);
  CHECK_THROWS_WITH_AS((void)plain.path_for(0, logs_of({{"accuracy", 0.5}})),
                       doctest::Contains("names \"loss\", which the epoch's logs lack (they have epoch, accuracy)"),
                       strata::Error);
  nn::ModelCheckpoint best{"b-{epoch}.ckpt", {.monitor = "val_loss", .save_best_only = true, .weights_only = false}};
  scripted(best, m, {1.0, 2.0, 0.5, 0.7});
  CHECK(m.saved == 2);  // epochs 0 and 2
  CHECK(best.last_saved() == "b-3.ckpt");
}

TEST_CASE("ModelCheckpoint every N batches: {epoch}, {batch}, {step} in the name; what save_freq refuses") {
  FakeModel m;
  nn::ModelCheckpoint c{"s-{epoch}-{batch:03d}-{step}-{loss:.2f}.w", {.save_freq = 5}};
  CHECK(c.path_for(nn::ModelCheckpoint::At{.epoch = 1, .batch = 2, .step = 9}, logs_of({{"loss", 0.25}})) ==
        "s-2-003-9-0.25.w");
  nn::ModelCheckpoint counts_as_values{"v-{step:.1f}-{batch:e}.w", {.save_freq = 1}};
  CHECK(counts_as_values.path_for(nn::ModelCheckpoint::At{.epoch = 0, .batch = 0, .step = 4}, {}) ==
        "v-4.0-1.000000e+00.w");
  // {batch} and {step} only where a save has them; a bad save_freq; val_* after a batch
  CHECK_THROWS_WITH_AS(nn::ModelCheckpoint("e-{batch}.w"), doctest::Contains("names {batch}, which only a save every "
                                                                             "save_freq batches has"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(nn::ModelCheckpoint("e-{step:02d}.w"), doctest::Contains("names {step}"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::ModelCheckpoint("e.w", {.save_freq = -1}), doctest::Contains("save_freq must be 0"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(nn::ModelCheckpoint("e.w", {.save_best_only = true, .save_freq = 2}),
                       doctest::Contains("whose logs have no val_* values"), strata::Error);
  CHECK_THROWS_WITH_AS((void)c.path_for(nn::ModelCheckpoint::At{.epoch = 0, .batch = 0}, logs_of({{"acc", 1.0}})),
                       doctest::Contains("which the batch's logs lack (they have epoch, batch, step, acc)"),
                       strata::Error);
  // scripted batches: every 3rd, counted across epochs (2 epochs of 4 batches: after batches 3, 6),
  // none at epoch ends; save_best_only compares the batch's value
  nn::ModelCheckpoint every3{"b-{epoch}-{batch}.ckpt", {.monitor = "loss", .save_best_only = true,
                                                        .weights_only = false, .save_freq = 3}};
  every3.set_model(&m);
  every3.on_train_begin();
  const double loss[] = {0.9, 0.8, 0.7, 0.6, 0.95, 0.5, 0.4, 0.3};
  std::vector<std::string> saved;
  for (int e = 0, k = 0; e < 2; ++e) {
    every3.on_epoch_begin(e);
    for (int b = 0; b < 4; ++b, ++k) {
      const int before = m.saved;
      every3.on_batch_end(b, logs_of({{"loss", loss[k]}}));
      if (m.saved != before) saved.push_back(every3.last_saved().string());
    }
    every3.on_epoch_end(e, logs_of({{"loss", 0.1}}));
  }
  CHECK(saved == std::vector<std::string>{"b-1-3.ckpt", "b-2-2.ckpt"});
  // a resumed run (BackupAndRestore) goes on with the count (2 batches since the save) and the best (0.5)
  nn::ModelCheckpoint resumed{"b-{epoch}-{batch}.ckpt", {.monitor = "loss", .save_best_only = true,
                                                         .weights_only = false, .save_freq = 3}};
  resumed.set_model(&m);
  resumed.on_train_begin();
  resumed.load_state(every3.save_state());
  const int before = m.saved;
  resumed.on_epoch_begin(2);
  resumed.on_batch_end(0, logs_of({{"loss", 0.6}}));  // the 3rd since the save, but 0.6 > best 0.5
  CHECK(m.saved == before);
  resumed.on_batch_end(1, logs_of({{"loss", 0.45}}));
  resumed.on_batch_end(2, logs_of({{"loss", 0.6}}));
  CHECK(m.saved == before);
  resumed.on_batch_end(3, logs_of({{"loss", 0.4}}));  // the 3rd again: improves
  CHECK(m.saved == before + 1);
  CHECK(resumed.last_saved() == "b-3-4.ckpt");
  CHECK(resumed.best() == 0.4);
}

TEST_CASE("ModelCheckpoint every N batches in fit under 2 mirrored replicas: each file holds its step's weights") {
  TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto m = sgd_model(s, 0.05);
  // 6 batches an epoch, 2 epochs: every 4th batch is steps 4, 8, 12 (epoch 1 batch 4, epoch 2 batches 2 and 6)
  nn::ModelCheckpoint every4{(d.path / "w-{epoch}-{batch}-{step:03d}.weights").string(), {.save_freq = 4}};
  std::vector<std::vector<float>> at_step(13);
  nn::LambdaCallback look;
  look.on_batch_end_fn = [&](int, const nn::Logs&) { at_step[static_cast<std::size_t>(m.iterations())] = strata_test::flat_weights(m); };
  m.fit(s.distribute(train_set()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&look, &every4}});
  std::vector<std::string> names;
  for (const auto& f : std::filesystem::directory_iterator(d.path)) names.push_back(f.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"w-1-4-004.weights", "w-2-2-008.weights", "w-2-6-012.weights"});
  CHECK(every4.last_saved() == d.path / "w-2-6-012.weights");
  for (const auto& file : {std::pair{"w-1-4-004.weights", 4}, {"w-2-2-008.weights", 8}, {"w-2-6-012.weights", 12}}) {
    const std::string name = file.first;  // (not a structured binding: clang 14 cannot capture one in CAPTURE)
    const int step = file.second;
    CAPTURE(name);
    auto back = sgd_model(s, 0.05);
    back.build(strata::Shape{6});
    back.load_weights(d.path / name);
    CHECK(strata_test::flat_weights(back) == at_step[static_cast<std::size_t>(step)]);
  }
  CHECK(at_step[4] != at_step[8]);
  // checkpoints (weights, optimizer state, step), the best running loss only: the files name steps it improved at
  TempDir d2;
  auto m2 = sgd_model(s, 0.05);
  nn::ModelCheckpoint best{(d2.path / "c-{step}.ckpt").string(),
                           {.monitor = "loss", .save_best_only = true, .weights_only = false, .save_freq = 2}};
  std::vector<double> running;
  nn::LambdaCallback losses;
  losses.on_batch_end_fn = [&](int, const nn::Logs& l) { running.push_back(l.at("loss")); };
  m2.fit(s.distribute(train_set()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&losses, &best}});
  std::vector<std::string> want;
  std::optional<double> lowest;
  for (std::size_t k = 1; k < running.size(); k += 2)
    if (!lowest || running[k] < *lowest) lowest = running[k], want.push_back("c-" + std::to_string(k + 1) + ".ckpt");
  std::vector<std::string> got;
  for (const auto& f : std::filesystem::directory_iterator(d2.path)) got.push_back(f.path().filename().string());
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  CHECK(got == want);
  CHECK(best.best() == lowest);
}

TEST_CASE("EarlyStopping in fit under every strategy, on CPU and GPU (stand-in) replicas: stops at the expected "
          "epoch, restores the best weights") {
  strata_test::for_each_strategy_and_backend({}, [&](auto& s, const strata::StrategyInfo&, strata_test::Backend) {
    auto m = sgd_model(s, 0.05);
    // no epoch improves on the first by 10: stops at epoch 2 (patience 2), back to epoch 0's weights
    nn::EarlyStopping stop{{.monitor = "loss", .min_delta = 10.0, .patience = 2, .restore_best_weights = true}};
    std::vector<float> epoch0, last;
    nn::LambdaCallback look;
    look.on_epoch_end_fn = [&](int e, const nn::Logs&) {
      (e == 0 ? epoch0 : last) = strata_test::flat_weights(m);
    };
    const auto h = m.fit(s.distribute(train_set()),
                         {.epochs = 10, .verbose = nn::Verbosity::Silent, .callbacks = {&look, &stop}});
    CHECK(h.epochs().size() == 3);
    CHECK(stop.stopped_epoch() == 2);
    CHECK(stop.best_epoch() == 0);
    CHECK(last != epoch0);
    CHECK(strata_test::flat_weights(m) == epoch0);
  });
}

TEST_CASE("ReduceLROnPlateau and LearningRateScheduler: the next steps use the new rate, in every copy (CPU and GPU "
          "stand-in replicas)") {
  // epochs of 6 steps; the rate 0.1, then 0.05 from epoch 2 (patience 1: cut at epoch 1's end), as a
  // schedule of the step
  const float r0 = 0.1f, r1 = r0 * 0.5f;
  const nn::PiecewiseConstantDecay reference{{11}, {r0, r1}};
  const auto run = [&](auto& s, nn::LearningRate lr, std::vector<nn::Callback*> cbs) {
    auto m = sgd_model(s, std::move(lr));
    const std::string before = m.optimizer().describe();
    m.fit(s.distribute(train_set()), {.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = cbs});
    CHECK(m.optimizer().describe() == before);  // the run's fingerprint does not move with the rate
    return strata_test::flat_weights(m);
  };
  const auto check = [&](auto& s) {
    const auto want = run(s, reference, {});
    nn::ReduceLROnPlateau plateau{{.monitor = "loss", .factor = 0.5, .patience = 1, .min_delta = 10.0}};
    CHECK(run(s, r0, {&plateau}) == want);
    nn::LearningRateScheduler sched{[](int epoch, float lr) { return epoch == 2 ? lr * 0.5f : lr; }};
    CHECK(run(s, r0, {&sched}) == want);
    CHECK(run(s, r0, {}) != want);
  };
  strata_test::for_each_strategy_and_backend({.synchronous = true},
                                             [&](auto& s, const strata::StrategyInfo&, strata_test::Backend) { check(s); });
  // the parameter server's servers (in this process) get it too; staleness 0: rounds that repeat (its
  // updates count their steps per shard: compared with each other, not with the step schedule)
  strata::ParameterServerStrategy ps{{.workers = 2, .servers = 2, .staleness = std::uint64_t{0}}};
  nn::ReduceLROnPlateau plateau{{.monitor = "loss", .factor = 0.5, .patience = 1, .min_delta = 10.0}};
  nn::LearningRateScheduler sched{[](int epoch, float lr) { return epoch == 2 ? lr * 0.5f : lr; }};
  const auto cut = run(ps, r0, {&plateau});
  CHECK(run(ps, r0, {&sched}) == cut);
  CHECK(run(ps, r0, {}) != cut);
}

TEST_CASE("A rate set at run time is the model's own: a copy of the optimizer does not share it") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  nn::SGD opt{0.1};
  auto a = s.scope(strata_test::blobs_mlp);
  a.compile(opt, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  auto b = s.scope(strata_test::blobs_mlp);
  b.compile(opt, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  a.optimizer().learning_rate()->set_override(0.01f);
  CHECK((*a.optimizer().learning_rate())(0) == 0.01f);
  CHECK((*b.optimizer().learning_rate())(0) == 0.1f);
  CHECK((*opt.learning_rate())(0) == 0.1f);
  CHECK(a.optimizer().describe() == "SGD(learning_rate=0.1, momentum=0, nesterov=0)");
  CHECK_THROWS_AS(a.optimizer().learning_rate()->set_override(-1.f), strata::Error);
}

TEST_CASE("TerminateOnNaN stops after the batch whose loss is not finite") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto x = data().x;
  for (std::size_t j = 0; j < 6; ++j) x[(16 * 3 + 2) * 6 + j] = std::nanf("");  // a row of batch 3
  auto m = sgd_model(s, 0.05);
  nn::TerminateOnNaN nan_stop;
  int batches = 0;
  nn::LambdaCallback count;
  count.on_batch_end_fn = [&](int, const nn::Logs&) { ++batches; };
  m.fit(s.distribute(strata::data::from_tensor_slices(x, data().y).batch(16)),
        {.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = {&count, &nan_stop}});
  REQUIRE(nan_stop.terminated_at());
  CHECK(*nan_stop.terminated_at() == std::pair{0, 3});
  CHECK(batches == 4);
  // finite losses: it lets fit run
  auto fine = sgd_model(s, 0.05);
  const auto h = fine.fit(s.distribute(train_set()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&nan_stop}});
  CHECK(h.epochs().size() == 2);
  CHECK(!nan_stop.terminated_at());
}

TEST_CASE("ModelCheckpoint and CSVLogger in fit: the files hold the epochs' weights and logs") {
  TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto m = sgd_model(s, 0.05);
  nn::ModelCheckpoint ckpt{(d.path / "w-{epoch:02d}-{loss:.4f}.weights").string()};
  nn::CSVLogger csv{d.path / "log.csv", {.separator = ';'}};
  std::vector<std::vector<float>> weights;
  nn::LambdaCallback look;
  look.on_epoch_end_fn = [&](int, const nn::Logs&) { weights.push_back(strata_test::flat_weights(m)); };
  const auto h = m.fit(s.distribute(train_set()),
                       {.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = {&look, &ckpt, &csv}});
  std::string want = "epoch;accuracy;loss\n";
  for (std::size_t e = 0; e < 3; ++e) {
    const auto& l = h.epochs()[e];
    char name[64];
    std::snprintf(name, sizeof name, "w-%02zu-%.4f.weights", e + 1, l.at("loss"));
    auto back = sgd_model(s, 0.05);
    back.build(strata::Shape{6});
    back.load_weights(d.path / name);
    CHECK(strata_test::flat_weights(back) == weights[e]);
    want += std::to_string(e) + ";" + nn::detail::exact_short(l.at("accuracy")) + ";" +
            nn::detail::exact_short(l.at("loss")) + "\n";
  }
  CHECK(read_all(d.path / "log.csv") == want);
  // TensorBoard without a model: fit's model says this process is the chief
  nn::TensorBoard tb{d.path / "tb"};
  m.fit(s.distribute(train_set()), {.epochs = 1, .verbose = nn::Verbosity::Silent, .callbacks = {&tb}});
  CHECK(std::filesystem::file_size(tb.train_file()) > 0);
  // append: the next fit's rows follow, without a second header
  nn::CSVLogger more{d.path / "log.csv", {.separator = ';', .append = true}};
  m.fit(s.distribute(train_set()), {.epochs = 1, .verbose = nn::Verbosity::Silent, .callbacks = {&more}});
  const std::string all = read_all(d.path / "log.csv");
  CHECK(all.starts_with(want));
  CHECK(all.substr(want.size()).starts_with("0;"));
  CHECK(all.find("epoch", 1) == std::string::npos);
}

// The logging callbacks run on the host, on the logs fit returns: on GPU replicas (stand-ins: the device
// executors, the device team's sums) they write the CPU replicas' rows, one device and mirrored.
TEST_CASE("CSVLogger on GPU replicas (stand-ins) writes the CPU replicas' rows, byte for byte") {
  const auto run = [&](auto& s, const std::filesystem::path& file) {
    auto m = sgd_model(s, 0.05);
    nn::CSVLogger csv{file};
    nn::EarlyStopping stop{{.monitor = "loss", .min_delta = 10.0, .patience = 2}};
    m.fit(s.distribute(train_set()), {.epochs = 5, .verbose = nn::Verbosity::Silent, .callbacks = {&csv, &stop}});
    return std::make_pair(read_all(file), stop.stopped_epoch());
  };
  TempDir d;
  strata::OneDeviceStrategy cpu1{strata::cpu(0)};
  strata::MirroredStrategy cpu3{strata::cpu_replicas(3)};
  const auto want1 = run(cpu1, d.path / "cpu1.csv"), want3 = run(cpu3, d.path / "cpu3.csv");
  CHECK(want1.second == 2);
  strata_test::HostAsGpu host;
  strata::OneDeviceStrategy gpu1{strata::gpu(0)};
  strata::MirroredStrategy gpu3{strata::virtual_gpus(0, 3)};
  CHECK(run(gpu1, d.path / "gpu1.csv") == want1);
  CHECK(run(gpu3, d.path / "gpu3.csv") == want3);
  CHECK(want3.first.find("2,") != std::string::npos);  // three rows: epochs 0, 1 and 2
}

namespace {
struct Crashed {};
//! Throws (a kill, as far as fit can tell) at the end of epoch `epoch`, after the callbacks before it.
struct CrashAtEpochEnd final : nn::Callback {
  int epoch;
  explicit CrashAtEpochEnd(int e) : epoch(e) {}
  void on_epoch_end(int e, const nn::Logs&) override {
    if (e == epoch) throw Crashed{};
  }
};
}  // namespace

TEST_CASE("BackupAndRestore: a run killed and resumed makes the uninterrupted run's callback decisions") {
  // patience 2 on a loss that never improves by 10: the rate halves at epochs 2 and 4; early stopping
  // (patience 4) stops at epoch 4 back to epoch 0's weights; the run is killed at epoch 3's end, after
  // its CSV row, before its checkpoint: it resumes from epoch 2's end (step 18) with the halved rate,
  // the counters, the best weights and the CSV file as they were then
  struct Run {
    std::vector<float> weights;
    std::string csv;
    int stopped;
    float rate;
    std::vector<double> losses;
  };
  const auto run = [&](auto& s, const std::filesystem::path& dir, bool crash) {
    nn::BackupAndRestore backup{dir / "backup", {.keep = 1}};
    nn::ReduceLROnPlateau plateau{{.monitor = "loss", .factor = 0.5, .patience = 2, .min_delta = 10.0}};
    nn::EarlyStopping stop{{.monitor = "loss", .min_delta = 10.0, .patience = 4, .restore_best_weights = true}};
    nn::CSVLogger csv{dir / "log.csv"};
    CrashAtEpochEnd kill{crash ? 3 : -1};
    std::vector<nn::Callback*> cbs{&backup, &plateau, &csv, &stop, &kill};
    const nn::FitOptions opts{.epochs = 8, .verbose = nn::Verbosity::Silent, .callbacks = cbs};
    if (crash) {
      auto m = sgd_model(s, 0.1);
      CHECK_THROWS_AS(m.fit(s.distribute(train_set()), opts), Crashed);
      kill.epoch = -1;
    }
    auto m = sgd_model(s, 0.1);
    const auto h = m.fit(s.distribute(train_set()), opts);
    if (crash) CHECK(backup.resumed_from() == 18);
    Run r{strata_test::flat_weights(m), read_all(dir / "log.csv"), stop.stopped_epoch(),
          m.optimizer().learning_rate()->override_rate().value_or(0.f), h.at("loss")};
    return r;
  };
  strata_test::for_each_strategy({.synchronous = true}, [&](auto& s, const strata::StrategyInfo&) {
    TempDir a, b;
    const Run want = run(s, a.path, false);
    CHECK(want.stopped == 4);
    CHECK(want.rate == 0.025f);
    const Run got = run(s, b.path, true);
    CHECK(got.csv == want.csv);
    CHECK(got.stopped == want.stopped);
    CHECK(got.rate == want.rate);
    CHECK(got.weights == want.weights);
    // the resumed fit's history: epochs 3 and 4, with the uninterrupted run's losses
    REQUIRE(got.losses.size() == 2);
    CHECK(std::vector<double>(want.losses.begin() + 3, want.losses.end()) == got.losses);
  });
}

namespace {
//! One fit of sgd_model on train_set (6 batches an epoch) under `s`, backed
//! up every 2 steps in dir/backup, with `callbacks` after the backup;
//! `out`: where fit prints (null: silent). Returns the weights.
template <class S>
std::vector<float> backed_up_fit(S& s, const std::filesystem::path& dir, std::vector<nn::Callback*> callbacks,
                                 int epochs = 3, std::FILE* out = nullptr) {
  nn::BackupAndRestore backup{dir / "backup", {.save_every_steps = 2}};
  callbacks.insert(callbacks.begin(), &backup);
  auto m = sgd_model(s, 0.1);
  m.fit(s.distribute(train_set().shuffle(96, 5)),
        {.epochs = epochs, .verbose = out ? nn::Verbosity::PerEpoch : nn::Verbosity::Silent,
         .callbacks = callbacks, .out = out ? out : stdout});
  return strata_test::flat_weights(m);
}
}  // namespace

TEST_CASE("BackupAndRestore: a callback added or dropped on resume carries on; each gets back only its own state") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  TempDir want;
  {
    nn::CSVLogger csv{want.path / "log.csv"};
    backed_up_fit(s, want.path, {&csv});
  }
  const std::string rows = read_all(want.path / "log.csv");
  SUBCASE("dropped: an EarlyStopping before the CSV logger in the run stopped, not in the resumed one") {
    TempDir d;
    nn::EarlyStopping stop{{.monitor = "loss", .patience = 10}};
    nn::CSVLogger csv{d.path / "log.csv"};
    strata_test::StopAtStep kill{9, false};  // after epoch 0's row; resumes from step 8
    CHECK_THROWS_AS(backed_up_fit(s, d.path, {&stop, &csv, &kill}), strata_test::Crashed);
    nn::CSVLogger again{d.path / "log.csv"};
    backed_up_fit(s, d.path, {&again});
    CHECK(read_all(d.path / "log.csv") == rows);
  }
  SUBCASE("added: an EarlyStopping and a TensorBoard before the CSV logger in the resumed run only") {
    TempDir d;
    nn::CSVLogger csv{d.path / "log.csv"};
    strata_test::StopAtStep kill{9, false};
    CHECK_THROWS_AS(backed_up_fit(s, d.path, {&csv, &kill}), strata_test::Crashed);
    nn::EarlyStopping stop{{.monitor = "loss", .patience = 10}};
    nn::TensorBoard tb{d.path / "tb", {.update_freq = 1}};
    nn::CSVLogger again{d.path / "log.csv"};
    backed_up_fit(s, d.path, {&stop, &tb, &again});
    CHECK(read_all(d.path / "log.csv") == rows);
    CHECK(stop.best_epoch() >= 1);  // it saw the resumed run's epochs (1 and 2), from a fresh start
  }
  SUBCASE("two CSV loggers swapped in the list: each goes on with its own file") {
    TempDir d;
    nn::CSVLogger a{d.path / "log.csv"}, b{d.path / "other.csv", {.separator = ';'}};
    strata_test::StopAtStep kill{9, false};
    CHECK_THROWS_AS(backed_up_fit(s, d.path, {&a, &b, &kill}), strata_test::Crashed);
    nn::CSVLogger a2{d.path / "log.csv"}, b2{d.path / "other.csv", {.separator = ';'}};
    backed_up_fit(s, d.path, {&b2, &a2});
    CHECK(read_all(d.path / "log.csv") == rows);
    std::string semi = rows;
    std::replace(semi.begin(), semi.end(), ',', ';');
    CHECK(read_all(d.path / "other.csv") == semi);
  }
  SUBCASE("a CSV logger added on resume starts its file at the resumed epoch; over an existing file it is refused") {
    TempDir d;
    strata_test::StopAtStep kill{9, false};
    CHECK_THROWS_AS(backed_up_fit(s, d.path, {&kill}), strata_test::Crashed);
    {
      std::ofstream f(d.path / "log.csv");
      f << "someone else's rows\n";
    }
    const auto before = strata_test::tree(d.path);
    nn::CSVLogger csv{d.path / "log.csv"};
    try {
      backed_up_fit(s, d.path, {&csv});
      FAIL("the resume was not refused");
    } catch (const nn::CheckpointDirectoryError& e) {
      const std::string what = e.what();
      CHECK(what.find("kept no history for") != std::string::npos);
      CHECK(what.find("log.csv") != std::string::npos);
    }
    CHECK(strata_test::tree(d.path) == before);
    std::filesystem::remove(d.path / "log.csv");
    nn::CSVLogger fresh{d.path / "log.csv"};
    backed_up_fit(s, d.path, {&fresh});
    // the header, then epochs 1 and 2: the uninterrupted run's rows from the resumed epoch on
    const auto header_end = rows.find('\n') + 1, row1 = rows.find('\n', header_end) + 1;
    CHECK(read_all(d.path / "log.csv") == rows.substr(0, header_end) + rows.substr(row1));
  }
}

TEST_CASE("BackupAndRestore: a CSV history renamed, deleted or cut short is refused before the first step, "
          "the directory as it was") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  TempDir want;
  {
    nn::CSVLogger csv{want.path / "log.csv"};
    backed_up_fit(s, want.path, {&csv});
  }
  for (const char* change : {"renamed", "deleted", "cut short"}) {
    CAPTURE(change);
    TempDir d;
    nn::CSVLogger csv{d.path / "log.csv"};
    strata_test::StopAtStep kill{9, false};
    CHECK_THROWS_AS(backed_up_fit(s, d.path, {&csv, &kill}), strata_test::Crashed);
    const std::string change_s = change;
    const auto kept = read_all(d.path / "log.csv");
    if (change_s == "renamed") std::filesystem::rename(d.path / "log.csv", d.path / "moved.csv");
    else if (change_s == "deleted") std::filesystem::remove(d.path / "log.csv");
    else std::filesystem::resize_file(d.path / "log.csv", kept.size() - 3);
    const auto before = strata_test::tree(d.path);
    nn::CSVLogger again{d.path / "log.csv"};
    strata_test::StopAtStep never{-1, false};
    std::int64_t first_step = -1;
    nn::LambdaCallback watch;
    watch.on_batch_end_fn = [&](int, const nn::Logs&) { first_step = 0; };
    try {
      backed_up_fit(s, d.path, {&again, &watch});
      FAIL("the resume was not refused");
    } catch (const nn::CheckpointDirectoryError& e) {
      const std::string what = e.what();
      CHECK(what.find("log.csv") != std::string::npos);
      CHECK(what.find(change_s == "cut short" ? "holds" : "missing") != std::string::npos);
      CHECK(what.find("--start-over") != std::string::npos);
    }
    CHECK(first_step == -1);  // no step ran
    CHECK(strata_test::tree(d.path) == before);
    // the file put back, the same command goes on, and its history is the uninterrupted run's
    if (change_s == "renamed") std::filesystem::rename(d.path / "moved.csv", d.path / "log.csv");
    else {
      std::ofstream f(d.path / "log.csv", std::ios::binary);
      f << kept;
    }
    nn::CSVLogger last{d.path / "log.csv"};
    backed_up_fit(s, d.path, {&last});
    CHECK(read_all(d.path / "log.csv") == read_all(want.path / "log.csv"));
  }
}

TEST_CASE("fit says where it resumed from; the resumed epoch's progress counts the whole epoch") {
  strata::OneDeviceStrategy s{strata::cpu(0)};
  TempDir d;
  strata_test::StopAtStep kill{5, false};  // epoch 0, after step 4's checkpoint
  CHECK_THROWS_AS(backed_up_fit(s, d.path, {&kill}, 2), strata_test::Crashed);
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  backed_up_fit(s, d.path, {}, 2, out);
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
  std::fclose(out);
  CAPTURE(text);
  CHECK(text.starts_with("Resumed from step 4 (epoch 1, batch 4) in " + (d.path / "backup").string() + "\n"));
  CHECK(text.find("Epoch 1/2\n6/6 - ") != std::string::npos);  // not 2/6: the epoch's batches trained before count
  CHECK(text.find("Epoch 2/2\n6/6 - ") != std::string::npos);
}

TEST_CASE("EarlyStopping and ReduceLROnPlateau say when they act, where fit prints") {
  struct Heard final : nn::ModelAccess {
    FakeModel m;
    std::vector<std::string> lines;
    bool is_chief() const override { return true; }
    std::vector<strata::io::NamedTensor> get_weights() const override { return m.get_weights(); }
    void set_weights(const std::vector<strata::io::NamedTensor>& ws) override { m.set_weights(ws); }
    void save_weights(const std::filesystem::path&) const override {}
    void save_checkpoint(const std::filesystem::path&) override {}
    std::int64_t iterations() const override { return 0; }
    float learning_rate() const override { return m.lr; }
    void set_learning_rate(float r) override { m.lr = r; }
    std::vector<double> from_chief(std::vector<double> v) override { return v; }
    bool any_worker(bool mine) override { return mine; }
    void say(const std::string& line) override { lines.push_back(line); }
  } heard;
  nn::EarlyStopping stop{{.monitor = "val_loss", .patience = 2, .restore_best_weights = true}};
  stop.set_model(&heard);
  stop.on_train_begin();
  const std::vector<double> values{1.0, 0.5, 0.7, 0.8, 0.9};
  int e = 0;
  for (; e < 5 && !stop.stop_training; ++e) {
    heard.m.w = static_cast<float>(e);
    stop.on_epoch_end(e, logs_of({{"val_loss", values[static_cast<std::size_t>(e)]}}));
  }
  stop.on_train_end({});
  CHECK(e == 4);
  CHECK(heard.lines == std::vector<std::string>{
                           "Epoch 4: early stopping (val_loss has not improved for 2 epoch(s))",
                           "Restoring model weights from the end of the best epoch: 2."});
  heard.lines.clear();
  nn::ReduceLROnPlateau plateau{{.monitor = "loss", .factor = 0.5, .patience = 1}};
  plateau.set_model(&heard);
  heard.m.lr = 0.1f;
  plateau.on_train_begin();
  plateau.on_epoch_end(0, logs_of({{"loss", 1.0}}));
  plateau.on_epoch_end(1, logs_of({{"loss", 2.0}}));
  CHECK(heard.lines == std::vector<std::string>{"Epoch 2: ReduceLROnPlateau reducing learning rate to 0.05."});
  // in fit, silent: nothing printed (the FitOptions::out is never written)
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  strata::OneDeviceStrategy s{strata::cpu(0)};
  auto m = sgd_model(s, 0.1);
  nn::EarlyStopping quick{{.monitor = "loss", .min_delta = 100.0, .patience = 0}};
  m.fit(s.distribute(train_set()), {.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = {&quick}, .out = out});
  CHECK(quick.stopped_epoch() == 1);
  CHECK(std::ftell(out) == 0);
  m.fit(s.distribute(train_set()), {.epochs = 3, .verbose = nn::Verbosity::PerEpoch, .callbacks = {&quick}, .out = out});
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
  std::fclose(out);
  CHECK(text.find("Epoch 2: early stopping (loss has not improved for 1 epoch(s))\n") != std::string::npos);
}

TEST_CASE("A run's fingerprint names a schedule's peak, not only its rate at step 0") {
  const auto warm = [](float peak) {
    return nn::AdamW{nn::CosineDecay{.initial = 0.f, .decay_steps = 100, .warmup_target = peak, .warmup_steps = 10}};
  };
  CHECK(warm(1e-3f).describe() != warm(2e-3f).describe());
  CHECK(warm(1e-3f).describe().find("warmup_target=0.001") != std::string::npos);
  // a schedule that says nothing of itself: its rates at several steps
  const auto ramp = [](float peak) { return nn::SGD{[peak](std::int64_t step) { return step < 5 ? 0.f : peak; }}; };
  CHECK(ramp(0.1f).describe() != ramp(0.2f).describe());
  CHECK(ramp(0.1f).describe() == ramp(0.1f).describe());
  // a constant rate reads as before
  CHECK(nn::Adam{1e-3}.describe().starts_with("Adam(learning_rate=0.001, "));
}

TEST_CASE("BackupAndRestore: a checkpoint at an epoch's last step, before its end, resumes into that epoch's end") {
  // steps_per_epoch 4 and a save every 4 steps: the step checkpoint of step 4 stands at epoch 0, batch 4;
  // the run dies in epoch 0's end, before the CSV row and the epoch's own checkpoint
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  const auto run = [&](const std::filesystem::path& dir, bool crash) {
    nn::BackupAndRestore backup{dir / "backup", {.save_every_steps = 4}};
    CrashAtEpochEnd kill{crash ? 0 : -1};
    nn::CSVLogger csv{dir / "log.csv"};
    std::vector<nn::Callback*> cbs{&backup, &kill, &csv};
    const nn::FitOptions opts{.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = cbs, .steps_per_epoch = 4};
    if (crash) {
      auto m = sgd_model(s, 0.1);
      CHECK_THROWS_AS(m.fit(s.distribute(train_set()), opts), Crashed);
      kill.epoch = -1;
    }
    auto m = sgd_model(s, 0.1);
    m.fit(s.distribute(train_set()), opts);
    if (crash) CHECK(backup.resumed_at()->batch == 4);
    return std::make_pair(strata_test::flat_weights(m), read_all(dir / "log.csv"));
  };
  TempDir a, b;
  const auto want = run(a.path, false);
  const auto got = run(b.path, true);
  CHECK(got.second == want.second);  // epoch 0's row too, with its four steps' values
  CHECK(got.first == want.first);
}
