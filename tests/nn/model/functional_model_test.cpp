// The functional model (nn/program/node.hpp, nn/model/model.hpp): layers called on nodes,
// merges (Add, Concatenate), gradients summed over a node's consumers,
// every strategy's executor, pipeline cuts only where one activation crosses.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/max_diff.hpp"

namespace functional_model_test {

namespace nn = strata::nn;
using strata::Tensor;

// A regression set: y = tanh(x . (1, 2, 3, 4)) for x in [-1, 1)^4.
struct Data {
  Tensor<float> x{{40, 4}}, y{{40, 2}};
  Data() {
    strata::Rng rng{11};
    for (std::size_t i = 0; i < 40; ++i) {
      float s = 0;
      for (std::size_t j = 0; j < 4; ++j) s += (x[i * 4 + j] = 2.f * rng.uniform() - 1.f) * static_cast<float>(j + 1);
      y[i * 2] = std::tanh(s);
      y[i * 2 + 1] = std::tanh(-0.5f * s);
    }
  }
};

// x -> Dense(4) -> (x + that) -> Dense(8, tanh) -> concat with the sum -> Dense(2):
// a residual connection (x feeds two nodes) and a concatenation (no kinks:
// the numeric gradient is defined everywhere).
nn::Model residual_model() {
  nn::Node x = nn::Input{{4}};
  nn::Node h = nn::Dense{4, {.activation = nn::Activation::Tanh}}(x);
  nn::Node s = nn::Add{}(x, h);
  nn::Node r = nn::Dense{8, {.activation = nn::Activation::Tanh}}(s);
  nn::Node c = nn::Concatenate{}(s, r);
  return nn::Model{x, nn::Dense{2}(c)};
}

std::vector<float> flat(const std::vector<nn::NamedTensor>& ws) {
  std::vector<float> out;
  for (const auto& w : ws) out.insert(out.end(), w.value.begin(), w.value.end());
  return out;
}

template <class S>
std::vector<float> train(S& strategy, int epochs, std::vector<double>* losses = nullptr) {
  const Data d;
  auto model = strategy.scope(residual_model);
  model.compile(nn::SGD{0.1}, nn::MeanSquaredError{}, {}, {.seed = 3});
  const auto h = model.fit(strategy.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(10)),
                           {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  if (losses) *losses = h.at("loss");
  return flat(model.get_weights());
}

using strata_test::max_diff;

TEST_CASE("a functional model's gradient is the numeric gradient of its loss (a node feeding two, a concatenation)") {
  const Data d;
  auto model = residual_model();
  model.compile(nn::SGD{1.0}, nn::MeanSquaredError{}, {}, {.seed = 5});
  model.build(strata::Shape{4});
  const auto ds = strata::data::from_tensor_slices(d.x, d.y).batch(40);
  const auto w0 = model.get_weights();
  auto loss_at = [&](const std::vector<nn::NamedTensor>& ws) {
    model.set_weights(ws);
    return model.evaluate(ds, {.verbose = nn::Verbosity::Silent}).at("loss");
  };
  // one SGD step of rate 1 on the whole set: w1 = w0 - gradient
  model.set_weights(w0);
  model.fit(ds, {.epochs = 1, .verbose = nn::Verbosity::Silent});
  const auto w1 = model.get_weights();
  int checked = 0;
  for (std::size_t t = 0; t < w0.size(); ++t)
    for (std::size_t i = 0; i < w0[t].value.size(); i += 3) {
      auto plus = w0, minus = w0;
      const float eps = 1e-2f;
      plus[t].value[i] += eps;
      minus[t].value[i] -= eps;
      const double numeric = (loss_at(plus) - loss_at(minus)) / (2.0 * eps);
      const double analytic = w0[t].value[i] - w1[t].value[i];
      CAPTURE(w0[t].name);
      CAPTURE(i);
      CHECK(analytic == doctest::Approx(numeric).epsilon(2e-2).scale(1e-2));
      ++checked;
    }
  CHECK(checked > 20);
}

TEST_CASE("a functional model trains under every synchronous strategy: replicas give one replica's weights") {
  strata::OneDeviceStrategy one;
  std::vector<double> ref_loss;
  const auto ref = train(one, 8, &ref_loss);
  CHECK(ref_loss.back() < 0.5 * ref_loss.front());
  CHECK(train(one, 8) == ref);  // bitwise across repeated runs
  strata::MirroredStrategy mirrored{strata::cpu_replicas(3)};  // 10 rows over 3 replicas: 4, 3, 3
  CHECK(max_diff(train(mirrored, 8), ref) < 1e-5f);
  strata::CentralStorageStrategy central{strata::cpu_replicas(2)};
  CHECK(max_diff(train(central, 8), ref) < 1e-5f);
  strata::MirroredStrategy zero3{strata::cpu_replicas(2)};
  zero3.executor_options().sharded_update = strata::ShardedUpdate::Parameters;
  CHECK(max_diff(train(zero3, 8), ref) < 1e-5f);
}

TEST_CASE("a functional model's pipeline stages start only where one activation crosses") {
  strata::OneDeviceStrategy one;
  const auto ref = train(one, 3);
  // nodes: 0 dense (x ->), 1 add (x, 0), 2 dense_1 (1), 3 concatenate (1, 2), 4 dense_2 (3):
  // a stage may start at 2 (nodes 2 and 3 both take node 1, the one crossing) and at 4,
  // not at 1 (node 1 takes x) nor at 3 (node 3 takes node 1, from before node 2)
  strata::PipelineStrategy three{strata::cpu_replicas(3)};
  three.pipeline_options().micro_batches = 1;
  CHECK(train(three, 3) == ref);  // one micro-batch: the same operations in the same order
  REQUIRE(three.pipeline_stats().stages.size() == 3);
  CHECK(three.pipeline_stats().stages[1].layers.begin == 2);
  CHECK(three.pipeline_stats().stages[2].layers.begin == 4);
  strata::PipelineStrategy four{strata::cpu_replicas(4)};
  CHECK_THROWS_WITH_AS(train(four, 1), doctest::Contains("can be cut in at most 3"), strata::Error);
  strata::PipelineStrategy inside{strata::cpu_replicas(2)};
  inside.pipeline_options().stages = {{0, 3}, {3, 5}};
  CHECK_THROWS_WITH_AS(train(inside, 1), doctest::Contains("a stage may start only where one activation alone crosses"),
                       strata::Error);
  strata::PipelineStrategy micro{strata::cpu_replicas(2)};
  micro.pipeline_options().micro_batches = 2;
  CHECK(max_diff(train(micro, 3), ref) < 1e-5f);
}

TEST_CASE("a functional model: summary shows each layer's inputs; unused branches are left out; checkpoints load") {
  nn::Node x = nn::Input{{4}};
  nn::Node a = nn::Dense{3}(x);
  nn::Node unused = nn::Dense{100}(x);  // not on the way to the output
  nn::Node b = nn::Dense{3}(x);
  auto model = nn::Model{x, nn::Add{}(a, b)};
  model.compile(nn::Adam{1e-2}, nn::MeanSquaredError{});
  CHECK(model.count_params() == 0);  // not built yet
  const std::string s = model.summary();
  CHECK(s.find("Model: \"functional\"") != std::string::npos);
  CHECK(s.find("Connected to") != std::string::npos);
  CHECK(s.find("dense, dense_1") != std::string::npos);
  CHECK(model.count_params() == 2 * (4 * 3 + 3));
  CHECK(model.layers().size() == 3);
  (void)unused;

  // weights and optimizer state round-trip through a checkpoint into a model made under another strategy
  const Data d;
  Tensor<float> y3{{40, 3}};
  for (std::size_t i = 0; i < y3.size(); ++i) y3[i] = d.x[i % d.x.size()];
  model.fit(strata::data::from_tensor_slices(d.x, y3).batch(8), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  const auto path = std::filesystem::temp_directory_path() / "functional_model_test.ckpt";
  model.save_checkpoint(path);
  strata::MirroredStrategy two{strata::cpu_replicas(2)};
  auto again = two.scope([&] {
    nn::Node x2 = nn::Input{{4}};
    return nn::Model{x2, nn::Add{}(nn::Dense{3}(x2), nn::Dense{3}(x2))};
  });
  again.compile(nn::Adam{1e-2}, nn::MeanSquaredError{});
  again.build(strata::Shape{4});
  again.load_checkpoint(path);
  CHECK(flat(again.get_weights()) == flat(model.get_weights()));
  std::filesystem::remove(path);
}

TEST_CASE("a functional model's mistakes are sentences") {
  nn::Node x = nn::Input{{4}};
  nn::Node y = nn::Input{{4}};
  CHECK_THROWS_WITH_AS(nn::Dense{2}(x, x), doctest::Contains("Dense takes one input, but was called on 2"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::Add{}(x), doctest::Contains("Add merges two or more inputs"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::Add{}(x, y), doctest::Contains("different graphs"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::Model(x, x), doctest::Contains("the output is the input itself"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::Model(x, nn::Dense{2}(y)), doctest::Contains("another graph"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::Model(nn::Dense{2}(x), nn::Dense{2}(x)), doctest::Contains("Input node"), strata::Error);
  // shapes: checked at build, naming the layer
  auto bad = nn::Model{x, nn::Add{}(x, nn::Dense{3}(x))};
  CHECK_THROWS_WITH_AS(bad.build(strata::Shape{4}), doctest::Contains("Model: layer 1 (Add): Add: every input must have one shape"),
                       strata::ShapeError);
  auto cat = nn::Model{x, nn::Concatenate{}(x, nn::Reshape{{2, 2}}(x))};
  CHECK_THROWS_WITH_AS(cat.build(strata::Shape{4}), doctest::Contains("agree on every axis but the last"), strata::ShapeError);
  // a merge in a Sequential
  auto seq = nn::Sequential{nn::Input{{4}}, nn::Add{}};
  CHECK_THROWS_WITH_AS(seq.build(strata::Shape{4}), doctest::Contains("use it in a functional model"), strata::ShapeError);
}

TEST_CASE("Add of a node with itself doubles its gradient; an empty batch passes through merges") {
  nn::Node x = nn::Input{{2}};
  nn::Node h = nn::Dense{2, {.use_bias = false}}(x);
  auto model = nn::Model{x, nn::Add{}(h, h)};
  model.compile(nn::SGD{1.0}, nn::MeanSquaredError{});
  model.build(strata::Shape{2});
  model.set_weights({{"dense/kernel", Tensor<float>{{2, 2}, {1.f, 0.f, 0.f, 1.f}}}});
  // y = 2 x W = 2 x at W = I; target 0: loss = mean((2x)^2) per example; dL/dW = x^T (2 * 2 * 2x / 2) / batch
  Tensor<float> xs{{1, 2}, {1.f, 0.f}}, ys{{1, 2}, {0.f, 0.f}};
  model.fit(strata::data::from_tensor_slices(xs, ys).batch(1), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  const auto w = model.get_weights()[0].value;
  // dL/dy = 2 (y - t) / 2 = y = (2, 0); dL/dh = 2 dL/dy = (4, 0); dL/dW[0][0] = x0 * 4 = 4
  CHECK(w[0] == doctest::Approx(1.f - 4.f));
  CHECK(w[1] == doctest::Approx(0.f));
  CHECK(w[3] == doctest::Approx(1.f));
  const auto p = model.predict(Tensor<float>{{0, 2}});
  CHECK(p.shape() == strata::Shape{0, 2});
}

}  // namespace functional_model_test
