// The Sequential model under every in-process strategy of the catalogue
// (tests/strategy/strategy_sweep.hpp) where a body holds for all: p replicas take the
// same steps as one on the same global batch (loss scaled by the global
// batch), runs repeat bitwise, weights save and load, and bad input is
// refused with a clear error.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "strategy/strategy_sweep.hpp"

#include "support/watchdog.hpp"

namespace model_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::Tensor;

namespace {

using strata_test::Blobs;
using strata_test::blobs;

nn::Sequential mlp(std::uint64_t) {
  return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::Dense{8}, nn::ReLU{}, nn::Dense{3}};
}

// Trains the MLP under strategy `s` for `epochs` on `data` (batches of `batch`)
// and returns the flattened weights.
template <class S>
std::vector<float> train(S& s, const Blobs& data, std::size_t batch, int epochs, std::uint64_t seed = 7,
                         nn::Verbosity v = nn::Verbosity::Silent) {
  auto model = s.scope([&] { return mlp(seed); });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = seed});
  auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(batch);
  model.fit(s.distribute(ds), {.epochs = epochs, .verbose = v});
  std::vector<float> flat;
  for (const auto& w : model.get_weights()) flat.insert(flat.end(), w.value.begin(), w.value.end());
  return flat;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("strata_model_test_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace

TEST_CASE("p replicas train as one on the same global batch, for every strategy and a short last batch") {
  strata_test::Watchdog dog("replica equivalence", 120s);
  // 101 examples in batches of 12: the last batch has 5 rows, fewer than 8 replicas.
  const Blobs data = blobs(101, 1);
  strata::OneDeviceStrategy one{strata::cpu(0)};
  const auto ref = train(one, data, 12, 3);
  // every synchronous strategy (parameter_server's workers each take their own batches)
  for (int p : {1, 2, 3, 8}) {
    CAPTURE(p);
    strata_test::for_each_strategy({.synchronous = true}, [&](auto& s, const strata::StrategyInfo& info) {
      if (p > 1 && !info.takes_replicas) return;  // it does not read p: once is enough
      CHECK(max_abs_diff(train(s, data, 12, 3), ref) < 2e-5);
    }, strata_test::small_choice(p));
  }
  CHECK(max_abs_diff(train(strata::get_strategy(), data, 12, 3), ref) == 0.0);
}

TEST_CASE("same seed, strategy and replica count give bitwise-identical weights; another seed differs") {
  strata_test::Watchdog dog("determinism", 120s);
  const Blobs data = blobs(64, 2);
  // every synchronous strategy (parameter_server's workers race: its exact runs are pinned at staleness 0)
  strata_test::for_each_strategy({.synchronous = true}, [&](auto& s, const strata::StrategyInfo&) {
    const auto a = train(s, data, 10, 2, 11);
    CHECK(a == train(s, data, 10, 2, 11));
    CHECK(a != train(s, data, 10, 2, 12));
  }, strata_test::small_choice(3));
}

TEST_CASE("fit learns, evaluate and predict agree, history and callbacks see every epoch and batch") {
  strata_test::Watchdog dog("fit", 120s);
  const Blobs data = blobs(600, 3), test = blobs(300, 4);
  strata_test::for_each_strategy({}, [&](auto& s, const strata::StrategyInfo&) {
    auto model = s.scope([] { return mlp(0); });
    model.compile(nn::Adam{0.02}, nn::SparseCategoricalCrossentropy{{.from_logits = true}},
                  {nn::Accuracy{}, nn::SparseCategoricalAccuracy{}});
    int epochs_seen = 0, batches_seen = 0;
    nn::LambdaCallback cb;
    cb.on_epoch_end_fn = [&](int e, const nn::Logs& l) {
      CHECK(e == epochs_seen++);
      CHECK(l.contains("val_accuracy"));
    };
    cb.on_batch_end_fn = [&](int, const nn::Logs& l) {
      ++batches_seen;
      CHECK(l.contains("loss"));
    };
    auto train_ds = strata::data::from_tensor_slices(data.x, data.y).shuffle(600, 5).batch(32);
    auto test_ds = strata::data::from_tensor_slices(test.x, test.y).batch(64);
    const auto h = model.fit(s.distribute(train_ds),
                             {.epochs = 8, .verbose = nn::Verbosity::Silent, .callbacks = {&cb}}, s.distribute(test_ds));
    CHECK(epochs_seen == 8);
    CHECK(batches_seen == 8 * 19);  // ceil(600 / 32)
    const auto loss = h.at("loss");
    REQUIRE(loss.size() == 8);
    CHECK(loss.back() < 0.5 * loss.front());
    const auto logs = model.evaluate(s.distribute(test_ds));
    CHECK(logs.at("accuracy") > 0.9);
    CHECK(logs.at("accuracy") == logs.at("sparse_categorical_accuracy"));
    CHECK(logs.at("accuracy") == doctest::Approx(h.at("val_accuracy").back()));
    // predict's argmax gives the same accuracy
    const Tensor<float> out = model.predict(test.x, 7);
    REQUIRE(out.shape() == strata::Shape{300, 3});
    std::size_t hits = 0;
    for (std::size_t i = 0; i < 300; ++i)
      hits += static_cast<std::int32_t>(std::max_element(&out[i * 3], &out[i * 3] + 3) - &out[i * 3]) == test.y[i];
    CHECK(static_cast<double>(hits) / 300 == doctest::Approx(logs.at("accuracy")));
    // over a dataset: (features, labels) batches, features alone, distributed or not, same rows in order
    // (to rounding: other batch sizes give the GEMM other row blockings)
    CHECK(strata::allclose(model.predict(s.distribute(test_ds)), out, {1e-5, 1e-6}));
    CHECK(strata::allclose(model.predict(strata::data::from_tensor_slices(test.x).batch(13)), out, {1e-5, 1e-6}));
    CHECK(model.predict(strata::data::from_tensor_slices(test.x).batch(7)) == out);  // same batches: bitwise
  });
}

TEST_CASE("a callback can stop training") {
  const Blobs data = blobs(100, 3);
  auto model = mlp(0);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  nn::LambdaCallback cb;
  int batches = 0;
  cb.on_batch_end_fn = [&](int b, const nn::Logs&) {
    ++batches;
    if (b == 2) cb.stop_training = true;
  };
  const auto h = model.fit(strata::data::from_tensor_slices(data.x, data.y).batch(10),
                           {.epochs = 5, .verbose = nn::Verbosity::Silent, .callbacks = {&cb}});
  CHECK(batches == 3);
  CHECK(h.epochs().size() == 1);
  CHECK(model.iterations() == 3);
}

TEST_CASE("summary lists layers, output shapes and parameter counts") {
  auto model = nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}},
                              nn::Dense{10}};
  const std::string s = model.summary();
  CHECK(s.find("flatten (Flatten)") != std::string::npos);
  CHECK(s.find("(None, 784)") != std::string::npos);
  CHECK(s.find("dense (Dense)") != std::string::npos);
  CHECK(s.find("dense_1 (Dense)") != std::string::npos);
  CHECK(s.find("100,480") != std::string::npos);
  CHECK(s.find("Total params: 101,770") != std::string::npos);
  CHECK(model.count_params() == 101770);
}

TEST_CASE("save_weights / load_weights round trip; a wrong or corrupt file changes nothing") {
  const Blobs data = blobs(64, 9);
  strata_test::for_each_strategy({}, [&](auto& s, const strata::StrategyInfo&) {
    auto a = s.scope([] { return mlp(0); });
    a.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
    a.fit(strata::data::from_tensor_slices(data.x, data.y).batch(16), {.verbose = nn::Verbosity::Silent});
    const auto path = temp_file("w.bin");
    a.save_weights(path);

    auto b = s.scope([] { return mlp(0); });
    b.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 99});
    b.build({6});
    b.load_weights(path);
    const auto wa = a.get_weights(), wb = b.get_weights();
    REQUIRE(wa.size() == wb.size());
    for (std::size_t i = 0; i < wa.size(); ++i) CHECK(wa[i].value == wb[i].value);
    CHECK(a.predict(data.x) == b.predict(data.x));  // every replica's copy was loaded

    // another architecture
    auto c = nn::Sequential{nn::Input{{6}}, nn::Dense{4}, nn::Dense{3}};
    c.build({6});
    const auto before = c.get_weights();
    CHECK_THROWS_WITH_AS(c.load_weights(path), doctest::Contains("does not fit this model"), strata::ShapeError);
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(c.get_weights()[i].value == before[i].value);

    // truncated, trailing bytes, bad magic, missing
    const auto bytes = std::filesystem::file_size(path);
    const auto bad = temp_file("bad.bin");
    std::filesystem::copy_file(path, bad, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(bad, bytes - 3);
    CHECK_THROWS_WITH_AS(b.load_weights(bad), doctest::Contains("truncated"), strata::Error);
    std::filesystem::resize_file(bad, bytes + 1);
    CHECK_THROWS_WITH_AS(b.load_weights(bad), doctest::Contains("trailing"), strata::Error);
    {
      std::ofstream f(bad, std::ios::binary);
      f << "NOTAWEIGHTSFILE";
    }
    CHECK_THROWS_WITH_AS(b.load_weights(bad), doctest::Contains("bad magic"), strata::Error);
    CHECK_THROWS_WITH_AS(b.load_weights(temp_file("missing")), doctest::Contains("does not exist"), strata::Error);
    for (std::size_t i = 0; i < wa.size(); ++i) CHECK(b.get_weights()[i].value == wa[i].value);
    std::filesystem::remove(path);
    std::filesystem::remove(bad);
  });
}

TEST_CASE("L2 regularization adds l2*sum(w^2) to the loss and 2*l2*w to the gradient, once across replicas") {
  // One Dense(1) without bias on zero inputs: the data gradient is 0, only L2 acts.
  // Every strategy whose replicas run the whole model (pipeline would split its one layer).
  for (int p : {1, 3}) {
    CAPTURE(p);
    strata_test::for_each_strategy({.whole_model = true}, [&](auto& s, const strata::StrategyInfo& info) {
      if (p > 1 && !info.takes_replicas) return;  // it does not read p: once is enough
      auto model =
          s.scope([] { return nn::Sequential{nn::Input{{1}}, nn::Dense{1, {.use_bias = false, .l2 = 0.25f}}}; });
      model.compile(nn::SGD{0.1}, nn::MeanSquaredError{});
      model.build({1});
      model.set_weights({{"dense/kernel", Tensor<float>{{1, 1}, {2.f}}}});
      auto ds = strata::data::from_tensor_slices(Tensor<float>{{6, 1}}, Tensor<float>{{6, 1}}).batch(6);
      const auto logs = model.evaluate(ds);
      CHECK(logs.at("loss") == doctest::Approx(0.25 * 4));
      model.fit(ds, {.verbose = nn::Verbosity::Silent});
      // w -= 0.1 * 2 * 0.25 * 2
      CHECK(model.get_weights()[0].value[0] == doctest::Approx(2.f - 0.1f));
    }, strata_test::small_choice(p));
  }
}

TEST_CASE("bad input: uncompiled, mismatched Input, labels out of range, mismatched batch extents") {
  const Blobs data = blobs(20, 3);
  auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(5);
  auto model = mlp(0);
  CHECK_THROWS_WITH_AS(model.fit(ds), doctest::Contains("compile the model first"), strata::Error);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  auto wide = strata::data::from_tensor_slices(Tensor<float>{{4, 7}}, Tensor<std::int32_t>{{4}}).batch(2);
  CHECK_THROWS_WITH_AS(model.fit(wide, {.verbose = nn::Verbosity::Silent}), doctest::Contains("declared Input [6]"),
                       strata::ShapeError);
  Tensor<std::int32_t> bad_labels = data.y;
  bad_labels[13] = 3;
  auto bad = strata::data::from_tensor_slices(data.x, bad_labels).batch(5);
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto m2 = s.scope([] { return mlp(0); });
  m2.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  // the replica that meets the bad label fails; the error names it and the label
  try {
    m2.fit(s.distribute(bad), {.verbose = nn::Verbosity::Silent});
    FAIL("fit accepted label 3 for 3 classes");
  } catch (const strata::ReplicaError& e) {
    CHECK(std::string(e.what()).find("label 3") != std::string::npos);
  }
  // a model made under one strategy refuses data distributed by another
  strata::MirroredStrategy other{strata::cpu_replicas(2)};
  CHECK_THROWS_WITH_AS(m2.fit(other.distribute(ds)), doctest::Contains("another strategy"), strata::Error);
}

TEST_CASE("a model without Input refuses mismatched data and still accepts the right data afterwards") {
  auto model = nn::Sequential{nn::Dense{4}, nn::Reshape{{2, 2}}, nn::Flatten{}, nn::Dense{3}};
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  // Dense acts on the last axis ([2, 3] -> [2, 4]): the Reshape to [2, 2] is what refuses
  CHECK_THROWS_WITH_AS(model.build({2, 3}), doctest::Contains("layer 1 (Reshape)"), strata::ShapeError);
  CHECK_FALSE(model.built());
  const Blobs data = blobs(8, 1);
  model.fit(strata::data::from_tensor_slices(data.x, data.y).batch(4), {.verbose = nn::Verbosity::Silent});
  CHECK(model.built());
  CHECK(model.count_params() == 6 * 4 + 4 + 4 * 3 + 3);
}

TEST_CASE("evaluate and predict before fit build the model; an empty dataset is an error and trains nothing") {
  const Blobs data = blobs(10, 3);
  auto model = mlp(0);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}});
  auto logs = model.evaluate(strata::data::from_tensor_slices(data.x, data.y).batch(4));
  CHECK(logs.at("loss") > 0);
  auto empty = strata::data::from_tensor_slices(data.x, data.y).take(0).batch(4);
  // it used to report loss 0 and accuracy 0 for each epoch, which read as a result
  CHECK_THROWS_WITH_AS(model.fit(empty, {.epochs = 2, .verbose = nn::Verbosity::Silent}),
                       doctest::Contains("fit: the dataset gave no batches"), strata::Error);
  CHECK_THROWS_WITH_AS(model.evaluate(empty), doctest::Contains("evaluate: the dataset gave no batches"), strata::Error);
  CHECK(model.iterations() == 0);
  CHECK(model.predict(Tensor<float>{{0, 6}}).shape() == strata::Shape{0, 3});
}

TEST_CASE("Dropout in a model: a run repeats bitwise, replicas draw their own masks, inference is deterministic") {
  strata_test::Watchdog dog("dropout model", 120s);
  const Blobs data = blobs(96, 5);
  auto run = [&](int p, std::uint64_t seed) {
    strata::MirroredStrategy s{strata::cpu_replicas(p)};
    auto model = s.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{32, {.activation = nn::Activation::ReLU}}, nn::Dropout{0.5f},
                            nn::Dense{16, {.activation = nn::Activation::ReLU}}, nn::Dropout{0.5f}, nn::Dense{3}};
    });
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = seed});
    model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
              {.epochs = 2, .verbose = nn::Verbosity::Silent});
    const Tensor<float> a = model.predict(data.x), b = model.predict(data.x);
    CHECK(a == b);  // no dropout at inference
    std::vector<float> flat;
    for (const auto& w : model.get_weights()) flat.insert(flat.end(), w.value.begin(), w.value.end());
    return flat;
  };
  const auto a = run(2, 3);
  CHECK(a == run(2, 3));
  CHECK(a != run(2, 4));
  // with dropout, 1 and 2 replicas legitimately differ: each replica draws its own stream
  CHECK(max_abs_diff(a, run(1, 3)) > 1e-4);
}

TEST_CASE("layer names follow Keras: dense, dense_1, conv2d, max_pool2d") {
  auto model = nn::Sequential{nn::Input{{8, 8, 1}}, nn::Conv2D{2, 3}, nn::MaxPool2D{2}, nn::Flatten{}, nn::Dense{4},
                              nn::Dense{2}};
  const std::string s = model.summary();
  for (const char* name : {"conv2d (Conv2D)", "max_pool2d (MaxPool2D)", "flatten (Flatten)", "dense (Dense)",
                           "dense_1 (Dense)"})
    CHECK_MESSAGE(s.find(name) != std::string::npos, name);
  CHECK(model.get_weights()[0].name == "conv2d/kernel");
}

TEST_CASE("progress: one plain line per epoch off a terminal, a redrawn bar when asked, nothing when silent") {
  const Blobs data = blobs(50, 3);
  auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(10);
  auto run = [&](nn::Verbosity v) {
    auto model = mlp(0);
    model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}});
    std::FILE* f = std::tmpfile();
    REQUIRE(f);
    model.fit(ds, {.epochs = 2, .verbose = v, .out = f});
    std::rewind(f);
    std::string text;
    for (int c; (c = std::fgetc(f)) != EOF;) text += static_cast<char>(c);
    std::fclose(f);
    return text;
  };
  const std::string plain = run(nn::Verbosity::Auto);  // a file is not a terminal
  CHECK(plain.find("Epoch 1/2\n5/5 - ") != std::string::npos);
  CHECK(plain.find("Epoch 2/2\n5/5 - ") != std::string::npos);
  CHECK(plain.find(" - loss: ") != std::string::npos);
  CHECK(plain.find(" - accuracy: ") != std::string::npos);
  CHECK(plain.find(" samples/s\n") != std::string::npos);
  CHECK(plain.find('\r') == std::string::npos);
  const std::string bar = run(nn::Verbosity::Bar);
  CHECK(bar.find("5/5 [==============================]") != std::string::npos);
  CHECK(bar.find('\r') != std::string::npos);
  CHECK(run(nn::Verbosity::Silent).empty());
}

}  // namespace model_test
