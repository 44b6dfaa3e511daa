// Loud failures (issue 23), in one process: a strategy's options changed
// after a model was made in its scope raise an Error naming the call order
// (they were ignored in silence: an invalid stage split raised nothing), the
// check passing every other call to the strategy's executor; a
// model's summary names workers, servers and stages; under several workers
// the chief alone writes a model's files (write_on_chief).
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

namespace loud_failures_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using strata::Range;

namespace {

nn::Sequential mlp() {
  return nn::Sequential{nn::Input{{4}}, nn::Dense{8, {.activation = nn::Activation::ReLU}}, nn::Dense{6},
                        nn::Dense{3}};
}

// The table of a 3-layer MLP under `s` (as Sequential::summary() prints it).
std::string table(strata::AnyStrategy& s) {
  nn::detail::LayerProgram m;
  m.layers.push_back(std::make_unique<nn::Dense>(8));
  m.layers.push_back(std::make_unique<nn::Dense>(6));
  m.layers.push_back(std::make_unique<nn::Dense>(3));
  (void)m.build(strata::Shape{4});
  return nn::detail::summary_table(m, s);
}

}  // namespace

TEST_CASE("pipeline_options() changed after a model was made in scope() raises, naming the call order") {
  strata::PipelineStrategy s{strata::cpu_replicas(2)};
  auto model = s.scope([] { return mlp(); });
  s.pipeline_options().stages = {Range{0, 1}, Range{1, 5}};  // invalid (3 layers), and too late
  try {
    (void)model.summary();  // builds: the options would take effect here
    FAIL("no error: the changed options were ignored in silence");
  } catch (const strata::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("pipeline_options() changed (stages) after a model was made in scope()") != std::string::npos);
    CHECK(what.find("set pipeline_options() before making the model") != std::string::npos);
  }
  CHECK_FALSE(model.built());  // nothing was placed with the old split

  // fit and evaluate check too (a model built before the change)
  s.pipeline_options() = {};
  auto built = s.scope([] { return mlp(); });
  built.compile(nn::SGD{0.1f}, nn::MeanSquaredError{});
  (void)built.summary();
  s.pipeline_options().micro_batches = 2;
  const strata::Tensor<float> x{{4, 4}}, y{{4, 3}};
  auto data = strata::data::from_tensor_slices(x, y).batch(4);
  CHECK_THROWS_WITH_AS(built.fit(s.distribute(data)), doctest::Contains("pipeline_options() changed (micro_batches)"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(built.evaluate(s.distribute(data)), doctest::Contains("micro_batches"), strata::Error);

  // set before making the model, they take effect (an invalid split is refused by the split check);
  // a model made after the change uses the new options
  s.pipeline_options().stages = {Range{0, 1}, Range{1, 5}};
  auto later = s.scope([] { return mlp(); });
  CHECK_THROWS_WITH_AS((void)later.summary(), doctest::Contains("cover layers [0, 5) of a model of 3 layers"),
                       strata::Error);
  s.pipeline_options().stages = {Range{0, 2}, Range{2, 3}};
  auto good = s.scope([] { return mlp(); });
  CHECK_NOTHROW((void)good.summary());
  CHECK(good.built());
  // setting them back to what the model was made with is no change
  s.pipeline_options().micro_batches = 1;
  s.pipeline_options().stages = {};
  CHECK_NOTHROW(built.evaluate(s.distribute(data)));
}

TEST_CASE("executor_options() changed after a model was made in scope() raises, naming the call order") {
  strata::MirroredStrategy s{strata::cpu_replicas(3)};
  auto model = s.scope([] { return mlp(); });
  s.executor_options().sharded_update = strata::ShardedUpdate::Off;
  CHECK_THROWS_WITH_AS(model.build(strata::Shape{4}),
                       doctest::Contains("executor_options() changed (sharded_update) after a model was made in "
                                         "scope(); a model reads its strategy's options when it is made"),
                       strata::Error);
  auto after = s.scope([] { return mlp(); });  // made after the change: fine
  CHECK_NOTHROW(after.build(strata::Shape{4}));
  CHECK(after.built());

  strata::CentralStorageStrategy c{strata::cpu_replicas(2)};
  auto central = c.scope([] { return mlp(); });
  c.executor_options().matmul = strata::MatmulPrecision::TF32;
  CHECK_THROWS_WITH_AS(central.build(strata::Shape{4}), doctest::Contains("executor_options() changed (matmul)"),
                       strata::Error);
  // every field is named: the buckets and the captured steps' too
  strata::MirroredStrategy m{strata::cpu_replicas(2)};
  auto bucketed = m.scope([] { return mlp(); });
  m.executor_options().bucket_bytes = 1 << 20;
  m.executor_options().read_every = 10;
  CHECK_THROWS_WITH_AS(bucketed.build(strata::Shape{4}),
                       doctest::Contains("executor_options() changed (read_every, bucket_bytes)"), strata::Error);
}

TEST_CASE("a summary names workers, servers, stages and replicas") {
  strata::ParameterServerStrategy ps{{.workers = 2, .servers = 1}};
  CHECK(table(ps.any()).starts_with("Model: \"sequential\" (parameter_server, 2 workers, 1 server)\n"));
  strata::ParameterServerStrategy ps3{{.workers = 3, .servers = 2}};
  CHECK(ps3.any().layout() == "3 workers, 2 servers");

  strata::PipelineStrategy pipe{strata::cpu_replicas(2)};
  CHECK(table(pipe.any()).starts_with("Model: \"sequential\" (pipeline, 2 stages)\n"));
  strata::PipelineStrategy dxp{strata::cpu_replicas(4)};
  dxp.pipeline_options().data_parallel = 2;
  CHECK(dxp.any().layout() == "2 stages x 2 copies");

  strata::MirroredStrategy mirrored{strata::cpu_replicas(3)};
  CHECK(table(mirrored.any()).starts_with("Model: \"sequential\" (mirrored, 3 replicas)\n"));
  strata::OneDeviceStrategy one{strata::cpu(0)};
  CHECK(one.any().layout() == "1 replica");
  // the table itself: layers, shapes, counts
  const std::string t = table(one.any());
  CHECK(t.find("dense_2 (Dense)") != std::string::npos);
  CHECK(t.find("Total params: 115") != std::string::npos);  // 4*8+8 + 8*6+6 + 6*3+3
}

TEST_CASE("write_on_chief: the chief writes, the others do not; with all_ok a failed write fails everywhere") {
  int writes = 0;
  const std::filesystem::path p = "unused.strata";
  nn::detail::write_on_chief(false, "save_weights", p, [&] { ++writes; });
  CHECK(writes == 0);
  nn::detail::write_on_chief(true, "save_weights", p, [&] { ++writes; });
  CHECK(writes == 1);

  // collective: every worker learns whether the chief's write worked
  std::vector<bool> said;
  auto others_fail = [&](bool ok) { return said.push_back(ok), ok; };
  auto chief_failed = [&](bool ok) { return said.push_back(ok), false; };
  CHECK_THROWS_WITH_AS(nn::detail::write_on_chief(true, "save_checkpoint", p, [] { throw strata::Error("disk full"); },
                                                  others_fail),
                       "disk full", strata::Error);
  CHECK(said == std::vector<bool>{false});
  CHECK_THROWS_WITH_AS(nn::detail::write_on_chief(false, "save_checkpoint", p, [&] { ++writes; }, chief_failed),
                       doctest::Contains("save_checkpoint: unused.strata: worker 0 (the chief)"), strata::Error);
  CHECK(writes == 1);
  nn::detail::write_on_chief(true, "save_weights", p, [&] { ++writes; }, others_fail);
  CHECK(said == std::vector<bool>{false, true, true});
  CHECK(writes == 2);

  // one worker: workers_agree is each worker's own answer, no collective
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto agree = nn::detail::workers_agree(s.any());
  CHECK(agree(true));
  CHECK_FALSE(agree(false));
}

namespace {
// An executor that records which of its functions ran.
struct Probe final : strata::Executor {
  std::vector<std::string>& log;
  strata::Tensor<float> v{{2}};
  explicit Probe(std::vector<std::string>& l) : log(l) {}
  void place(const strata::Tensor<float>&) override { log.push_back("place"); }
  void reset_optimizer() override { log.push_back("reset_optimizer"); }
  bool placed() const noexcept override { return log.push_back("placed"), true; }
  const strata::Tensor<float>& value() const override { return log.push_back("value"), v; }
  void assign(const strata::Tensor<float>&) override { log.push_back("assign"); }
  std::vector<strata::Tensor<float>> optimizer_state() override {
    log.push_back("optimizer_state");
    return {};
  }
  void set_optimizer_state(std::span<const strata::Tensor<float>>) override { log.push_back("set_optimizer_state"); }
  std::vector<std::uint64_t> update_counters() const override {
    log.push_back("update_counters");
    return {7};
  }
  void set_update_counters(std::span<const std::uint64_t>, std::int64_t) override {
    log.push_back("set_update_counters");
  }
  bool state_settled_between_steps() const noexcept override { return log.push_back("settled"), false; }
  std::string collectives_choice() const override { return log.push_back("collectives_choice"), "probe"; }
  strata::PassTotals run_pass(strata::Pass&) override { return log.push_back("run_pass"), strata::PassTotals{}; }
  void join_predictions(std::span<float>, bool) override { log.push_back("join_predictions"); }
  bool begin_fit(strata::Pass&) override { return log.push_back("begin_fit"), false; }
  void end_fit() override { log.push_back("end_fit"); }
  bool is_chief() const noexcept override { return log.push_back("is_chief"), false; }
};
}  // namespace

TEST_CASE("the options check hands every executor call to the strategy's executor") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  std::vector<std::string> log;
  strata::detail::OptionsChecked<strata::MirroredStrategy> w(s, std::make_unique<Probe>(log));
  strata::Executor& e = w;
  nn::detail::FnPass pass;
  e.place(strata::Tensor<float>{{2}});
  e.reset_optimizer();
  CHECK(e.placed());
  CHECK(e.value().size() == 2);
  e.assign(strata::Tensor<float>{{2}});
  CHECK(e.optimizer_state().empty());
  e.set_optimizer_state({});
  CHECK(e.update_counters() == std::vector<std::uint64_t>{7});
  e.set_update_counters({}, 0);
  CHECK_FALSE(e.state_settled_between_steps());
  CHECK(e.collectives_choice() == "probe");
  (void)e.run_pass(pass);
  e.join_predictions({}, false);
  CHECK_FALSE(e.begin_fit(pass));
  e.end_fit();
  CHECK_FALSE(e.is_chief());
  CHECK(log == std::vector<std::string>{"place", "reset_optimizer", "placed", "value", "assign", "optimizer_state",
                                        "set_optimizer_state", "update_counters", "set_update_counters", "settled",
                                        "collectives_choice", "run_pass", "join_predictions", "begin_fit", "end_fit",
                                        "is_chief"});
}

}  // namespace loud_failures_test
