// Pipeline model parallelism in one process (PipelineStrategy,
// parallel/pipeline/pipeline_executor.hpp, nn/program/stage_program.hpp): the same model code
// trains with its layers split over stages; for the same batches and seed
// the weights are those of one replica (bitwise with one micro-batch, within
// FP32 summation order otherwise) under every schedule; splits are checked;
// 1F1B holds fewer activations than GPipe; the memory budget is enforced
// before training; a stage that throws stops every stage.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "support/max_diff.hpp"
#include "support/boom_layer.hpp"
#include "support/watchdog.hpp"

namespace pipeline_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using namespace std::chrono_literals;
using strata::Range;
using strata::Schedule;

namespace {

// 6 layers, two without parameters, one with L2.
nn::Sequential mlp() {
  return nn::Sequential{nn::Input{{6}},  nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::ReLU{},      nn::Dense{12},
                        nn::Dense{8},    nn::ReLU{},
                        nn::Dense{3}};
}
nn::Sequential mlp_dropout() {
  return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dropout{0.25f},
                        nn::Dense{8}, nn::ReLU{}, nn::Dense{3}};
}

template <class S, class Make>
std::vector<float> train(S& s, Make make, std::size_t batch, int epochs, std::vector<double>* losses = nullptr) {
  const auto data = strata_test::blobs(203, 11);
  auto model = s.scope(make);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 5});
  const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(batch)),
                           {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  if (losses)
    for (const auto& logs : h.epochs()) losses->push_back(logs.at("loss"));
  return strata_test::flat_weights(model);
}

using strata_test::max_diff;

std::string what_of(const std::exception& e) { return e.what(); }

}  // namespace

TEST_CASE("pipeline training gives the weights of one replica, for every stage count, micro-batch count and schedule") {
  strata_test::Watchdog dog("pipeline equivalence", 600s);
  strata::OneDeviceStrategy one;
  std::vector<double> ref_loss;
  const auto ref = train(one, mlp, 25, 2, &ref_loss);  // 203 rows in batches of 25: a last batch of 3
  int bitwise = 0, close = 0;
  for (int S = 1; S <= 4; ++S)
    for (std::size_t M : {1u, 2u, 4u, 3u}) {
      std::vector<float> gpipe;
      for (Schedule k : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB}) {
        CAPTURE(S);
        CAPTURE(M);
        CAPTURE(strata::to_string(k));
        strata::PipelineStrategy s{strata::cpu_replicas(S)};
        s.pipeline_options() = {.stages = {}, .micro_batches = M, .schedule = k};
        std::vector<double> loss;
        const auto w = train(s, mlp, 25, 2, &loss);
        REQUIRE(s.pipeline_stats().stages.size() == static_cast<std::size_t>(S));
        CHECK(s.pipeline_stats().steps == 18);
        if (M == 1) {
          CHECK(w == ref);  // one micro-batch: the same operations in the same order
          CHECK(loss == ref_loss);
          ++bitwise;
        } else {
          CHECK(max_diff(w, ref) < 2e-5f);
          CHECK(w != ref);  // the micro-batches' sums do reorder the reduction (else this test proves less)
          for (std::size_t e = 0; e < loss.size(); ++e) CHECK(loss[e] == doctest::Approx(ref_loss[e]).epsilon(1e-6));
          ++close;
        }
        // GPipe and 1F1B add the micro-batches' gradients in the same order
        if (k == Schedule::GPipe) gpipe = w;
        if (k == Schedule::OneFOneB) CHECK(w == gpipe);
      }
    }
  CHECK(bitwise == 12);
  CHECK(close == 36);
}

TEST_CASE("with dropout, one micro-batch through any split is bitwise one replica") {
  strata_test::Watchdog dog("pipeline dropout", 300s);
  strata::OneDeviceStrategy one;
  const auto ref = train(one, mlp_dropout, 24, 2);
  for (int S = 2; S <= 5; ++S) {
    CAPTURE(S);
    strata::PipelineStrategy s{strata::cpu_replicas(S)};
    s.pipeline_options().micro_batches = 1;
    CHECK(train(s, mlp_dropout, 24, 2) == ref);
  }
}

TEST_CASE("automatic splits cover every layer once, balance parameters, and refuse more stages than layers") {
  for (std::size_t L = 1; L <= 9; ++L) {
    // layers of equal parameter counts, every third one without parameters
    std::vector<std::size_t> cost(L);
    for (std::size_t l = 0; l < L; ++l) cost[l] = l % 3 == 2 ? 0 : 100;
    for (std::size_t S = 1; S <= L; ++S) {
      CAPTURE(L);
      CAPTURE(S);
      const auto st = strata::detail::balance_stages(cost, S);
      REQUIRE(st.size() == S);
      CHECK_NOTHROW(strata::detail::check_stages(st, L, S));
      std::size_t worst = 0, total = 0;
      for (const Range& r : st) {
        std::size_t c = 0;
        for (std::size_t l = r.begin; l < r.end; ++l) c += cost[l];
        worst = std::max(worst, c);
        total += c;
      }
      // no split does better than the largest layer or the mean; this one is within a layer of both
      CHECK(worst <= std::max<std::size_t>(100, (total + S - 1) / S) + 100);
    }
    CHECK_THROWS_WITH_AS(strata::detail::balance_stages(cost, L + 1), doctest::Contains("every stage needs at least one layer"),
                         strata::Error);
  }
  const std::vector<std::size_t> equal(8, 10);
  CHECK(strata::detail::balance_stages(equal, 4) == std::vector<Range>{{0, 2}, {2, 4}, {4, 6}, {6, 8}});
  CHECK(strata::detail::balance_stages({1000, 0, 0, 1000}, 2) == std::vector<Range>{{0, 2}, {2, 4}});
  // hand-given ranges
  CHECK_THROWS_WITH_AS(strata::detail::check_stages({{0, 3}, {3, 3}}, 6, 2), doctest::Contains("empty layer range"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(strata::detail::check_stages({{0, 3}, {2, 6}}, 6, 2), doctest::Contains("overlap"), strata::Error);
  CHECK_THROWS_WITH_AS(strata::detail::check_stages({{0, 3}, {4, 6}}, 6, 2), doctest::Contains("gap"), strata::Error);
  CHECK_THROWS_WITH_AS(strata::detail::check_stages({{0, 3}, {3, 5}}, 6, 2), doctest::Contains("cover layers [0, 5)"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(strata::detail::check_stages({{0, 6}}, 6, 2), doctest::Contains("1 stages given for 2 replicas"),
                       strata::Error);
}

TEST_CASE("a model splits over 1 .. its layer count stages and trains; more stages than layers is an error") {
  strata_test::Watchdog dog("pipeline splits", 300s);
  strata::OneDeviceStrategy one;
  const auto ref = train(one, mlp, 50, 1);
  for (int S = 1; S <= 6; ++S) {
    CAPTURE(S);
    strata::PipelineStrategy s{strata::cpu_replicas(S)};
    CHECK(train(s, mlp, 50, 1) == ref);
    for (const auto& st : s.pipeline_stats().stages) CHECK(st.layers.size() >= 1);
  }
  strata::PipelineStrategy seven{strata::cpu_replicas(7)};
  CHECK_THROWS_WITH_AS(train(seven, mlp, 50, 1), doctest::Contains("7 stages for a model of 6 layers"), strata::Error);
  // by hand: what is given is used
  strata::PipelineStrategy two{strata::cpu_replicas(2)};
  two.pipeline_options().stages = {{0, 1}, {1, 6}};
  CHECK(train(two, mlp, 50, 1) == ref);
  CHECK(two.pipeline_stats().stages[0].params == 6 * 16 + 16);
  strata::PipelineStrategy bad{strata::cpu_replicas(2)};
  bad.pipeline_options().stages = {{0, 4}, {3, 6}};
  CHECK_THROWS_WITH_AS(train(bad, mlp, 50, 1), doctest::Contains("overlap"), strata::Error);
}

TEST_CASE("a split by measured compute times every layer, leaves the weights alone and trains as one replica") {
  strata_test::Watchdog dog("pipeline measured split", 300s);
  strata::OneDeviceStrategy one;
  const auto ref = train(one, mlp, 50, 1);
  for (int S : {2, 3}) {
    CAPTURE(S);
    strata::PipelineStrategy s{strata::cpu_replicas(S)};
    s.pipeline_options().balance = strata::Balance::Measured;
    s.pipeline_options().profile_steps = 2;
    CHECK(train(s, mlp, 50, 1) == ref);  // the profile's gradients went to scratch
    const auto& st = s.pipeline_stats();
    REQUIRE(st.layer_seconds.size() == 6);
    for (double t : st.layer_seconds) CHECK(t > 0);
    std::vector<Range> got;
    for (const auto& stage : st.stages) got.push_back(stage.layers);
    CHECK_NOTHROW(strata::detail::check_stages(got, 6, static_cast<std::size_t>(S)));
  }
  strata::PipelineStrategy both{strata::cpu_replicas(2)};
  both.pipeline_options().balance = strata::Balance::Measured;
  both.pipeline_options().stages = {{0, 3}, {3, 6}};
  CHECK_THROWS_WITH_AS(train(both, mlp, 50, 1), doctest::Contains("one or the other"), strata::Error);
}

TEST_CASE("1F1B holds at most S - s micro-batches of activations, fewer than GPipe's M") {
  strata_test::Watchdog dog("pipeline memory", 300s);
  const auto deep = [] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{32}, nn::Dense{32}, nn::Dense{32}, nn::Dense{3}};
  };
  std::vector<std::size_t> peak[2];
  int i = 0;
  for (Schedule k : {Schedule::GPipe, Schedule::OneFOneB}) {
    strata::PipelineStrategy s{strata::cpu_replicas(4)};
    s.pipeline_options() = {.stages = {}, .micro_batches = 8, .schedule = k};
    train(s, deep, 64, 1);
    for (const auto& st : s.pipeline_stats().stages) {
      CHECK(st.peak_activation_bytes > 0);
      CHECK(st.peak_activation_bytes <= st.bound_activation_bytes);
      peak[i].push_back(st.peak_activation_bytes);
    }
    ++i;
  }
  for (std::size_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    CHECK(peak[1][s] <= peak[0][s]);
    // GPipe keeps 8 micro-batches; 1F1B at most 4 - s: the ratio is measured, not assumed
    CHECK(peak[1][s] * 8 <= peak[0][s] * (4 - s));
  }
  CHECK(peak[1][0] < peak[0][0]);
}

TEST_CASE("a memory budget too small for one stage is an error before training; more stages fit it") {
  strata_test::Watchdog dog("pipeline budget", 300s);
  const auto wide = [] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{64}, nn::Dense{64}, nn::Dense{64}, nn::Dense{64}, nn::Dense{3}};
  };
  // about 12.9k parameters: 1 stage holds 5 x 4 bytes each (value, gradient, micro-batch gradient, Adam's 2)
  constexpr std::size_t budget = 200'000;
  strata::PipelineStrategy one{strata::cpu_replicas(1)};
  one.pipeline_options() = {.stages = {}, .micro_batches = 2, .memory_budget_bytes = budget};
  try {
    train(one, wide, 32, 1);
    FAIL("the budget was not enforced");
  } catch (const strata::Error& e) {
    const std::string w = e.what();
    CHECK(w.find("stage 0") != std::string::npos);
    CHECK(w.find("budget of 200000 bytes") != std::string::npos);
    CHECK(w.find("needs ") != std::string::npos);
  }
  strata::PipelineStrategy two{strata::cpu_replicas(2)};
  two.pipeline_options() = {.stages = {}, .micro_batches = 2, .memory_budget_bytes = budget};
  strata::OneDeviceStrategy ref;
  const auto w = train(two, wide, 32, 1);
  CHECK(max_diff(w, train(ref, wide, 32, 1)) < 2e-5f);
}

using strata_test::Boom;

TEST_CASE("a stage that throws stops every stage with its error, no hang") {
  strata_test::Watchdog dog("pipeline failure", 120s);
  const auto data = strata_test::blobs(64, 3);
  for (std::size_t where : {0u, 1u, 2u}) {  // which stage's layer throws (stage = layer here)
    for (Schedule k : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB}) {
      CAPTURE(where);
      strata::PipelineStrategy s{strata::cpu_replicas(3)};
      s.pipeline_options() = {.stages = {{0, 1}, {1, 2}, {2, 3}}, .micro_batches = 4, .schedule = k};
      auto model = s.scope([&] {
        nn::Sequential m{nn::Input{{6}}};
        for (std::size_t l = 0; l < 3; ++l) {
          if (l == where) m.add(Boom{2});
          else m.add(nn::Dense{l == 2 ? 3u : 6u});
        }
        return m;
      });
      model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
      try {
        model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
                  {.epochs = 1, .verbose = nn::Verbosity::Silent});
        FAIL("no error");
      } catch (const strata::ReplicaError& e) {
        CHECK(e.replica() == static_cast<int>(where));
        CHECK(what_of(e).find("boom in stage") != std::string::npos);
      }
      CHECK(model.iterations() == 2);  // the two steps before it trained
    }
  }
  // the last stage's own error (labels out of range) reaches the caller too
  auto labels = strata_test::blobs(32, 4);
  labels.y[5] = 7;
  strata::PipelineStrategy s{strata::cpu_replicas(3)};
  s.pipeline_options().micro_batches = 2;
  auto model = s.scope(mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  try {
    model.fit(s.distribute(strata::data::from_tensor_slices(labels.x, labels.y).batch(16)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
    FAIL("no error");
  } catch (const strata::ReplicaError& e) {
    CHECK(e.replica() == 2);
    INFO(what_of(e));
    CHECK(what_of(e).find("is not a class index") != std::string::npos);
  }
}

TEST_CASE("evaluate and predict run through the stages and agree with one replica") {
  strata_test::Watchdog dog("pipeline evaluate", 120s);
  const auto data = strata_test::blobs(70, 9);
  strata::OneDeviceStrategy one;
  strata::PipelineStrategy s{strata::cpu_replicas(3)};
  s.pipeline_options().micro_batches = 4;
  auto run = [&](auto& st) {
    auto m = st.scope(mlp);
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 5});
    const auto logs = m.evaluate(st.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
                                 {.verbose = nn::Verbosity::Silent});
    const auto p = m.predict(st.distribute(strata::data::from_tensor_slices(data.x).batch(32)));
    return std::pair{logs.at("loss"), std::vector<float>(p.data(), p.data() + p.size())};
  };
  const auto a = run(one), b = run(s);
  // micro-batches of 8 rows: the matrix products may round differently from 32 rows
  CHECK(max_diff(b.second, a.second) < 1e-6f);
  CHECK(b.second.size() == 70 * 3);
  CHECK(b.first == doctest::Approx(a.first).epsilon(1e-6));
}

// Data x pipeline: D copies of an S-stage pipeline on D x S replicas.
TEST_CASE("data x pipeline: D copies of the pipeline train as data parallelism over D replicas") {
  strata_test::Watchdog dog("data x pipeline", 600s);
  for (std::size_t batch : {25u, 1u}) {  // a last batch of 3 rows; and batches of 1 row (copy 1's share empty)
    CAPTURE(batch);
    const int epochs = batch == 1 ? 1 : 2;
    strata::MirroredStrategy mirrored{strata::cpu_replicas(2)};
    std::vector<double> ref_loss;
    const auto ref = train(mirrored, mlp, batch, epochs, &ref_loss);
    // one stage, one micro-batch: each copy is a replica of Mirrored, the two gradients summed: bitwise
    {
      strata::PipelineStrategy s{strata::cpu_replicas(2)};
      s.pipeline_options() = {.stages = {}, .micro_batches = 1, .data_parallel = 2};
      std::vector<double> loss;
      CHECK(train(s, mlp, batch, epochs, &loss) == ref);
      CHECK(loss == ref_loss);
      CHECK(s.pipeline_stats().stages.size() == 1);
    }
    // 2 x 2 and 2 x 3 replicas, several micro-batches, each schedule: within FP32 summation order
    for (int S : {2, 3})
      for (Schedule k : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB}) {
        CAPTURE(S);
        CAPTURE(strata::to_string(k));
        strata::PipelineStrategy s{strata::cpu_replicas(2 * S)};
        s.pipeline_options() = {.stages = {}, .micro_batches = 3, .schedule = k, .data_parallel = 2};
        std::vector<double> loss;
        const auto w = train(s, mlp, batch, epochs, &loss);
        CHECK(max_diff(w, ref) < 2e-5f);
        for (std::size_t e = 0; e < loss.size(); ++e) CHECK(loss[e] == doctest::Approx(ref_loss[e]).epsilon(1e-6));
        CHECK(s.pipeline_stats().stages.size() == static_cast<std::size_t>(S));
      }
  }
}

TEST_CASE("data x pipeline: evaluate and predict cover every copy's rows; replicas that do not divide are an error") {
  strata_test::Watchdog dog("data x pipeline evaluate", 120s);
  const auto data = strata_test::blobs(70, 9);
  strata::OneDeviceStrategy one;
  strata::PipelineStrategy s{strata::cpu_replicas(6)};
  s.pipeline_options() = {.stages = {}, .micro_batches = 2, .data_parallel = 3};  // 3 copies of 2 stages
  auto run = [&](auto& st) {
    auto m = st.scope(mlp);
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 5});
    const auto logs = m.evaluate(st.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
                                 {.verbose = nn::Verbosity::Silent});
    const auto p = m.predict(st.distribute(strata::data::from_tensor_slices(data.x).batch(32)));
    return std::pair{logs.at("loss"), std::vector<float>(p.data(), p.data() + p.size())};
  };
  const auto a = run(one), b = run(s);
  CHECK(b.second.size() == 70 * 3);
  CHECK(max_diff(b.second, a.second) < 1e-6f);
  CHECK(b.first == doctest::Approx(a.first).epsilon(1e-6));

  strata::PipelineStrategy odd{strata::cpu_replicas(5)};
  odd.pipeline_options().data_parallel = 2;
  auto m = odd.scope(mlp);
  m.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  CHECK_THROWS_WITH_AS(m.build(strata::Shape{6}),
                       doctest::Contains("5 replicas do not make data_parallel = 2 copies of a pipeline"),
                       strata::Error);
}

TEST_CASE("placement kind and name") {
  strata::PipelineStrategy s{strata::cpu_replicas(2)};
  CHECK(s.any().placement() == strata::PlacementKind::Pipeline);
  CHECK(s.any().name() == "pipeline");
}

}  // namespace pipeline_test
