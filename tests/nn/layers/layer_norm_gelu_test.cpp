// LayerNorm and GELU, the two ops added through the kernel bodies
// (kernels/bodies/): values against double-precision references,
// numeric-vs-analytic gradients (tests/nn/layers/gradcheck.hpp) in their layers and
// as Dense's fused activation, edges (NaN, large inputs, constant rows,
// empty batches) and errors, and a model that trains with both.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/nn.hpp>
#include <strata/nn/layers/activations.hpp>

#include "nn/layers/gradcheck.hpp"

namespace layer_norm_gelu_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using strata::Shape;
using strata::Tensor;

namespace {
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_grad_ref(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}
}  // namespace

TEST_CASE("GELU: the erf form's values, NaN propagates, large inputs saturate") {
  nn::GELU gelu;
  gelu.build({8});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor<float> x{{1, 8}, {-3.f, -1.f, 0.f, 0.5f, 1.f, 3.f, 30.f, -30.f}}, y;
  gelu.forward(x, y, {});
  for (std::size_t i = 0; i < 8; ++i) {
    CAPTURE(x[i]);
    CHECK(y[i] == doctest::Approx(gelu_ref(x[i])).epsilon(1e-6).scale(1e-7));
  }
  CHECK(y[2] == 0.f);
  CHECK(y[6] == 30.f);  // the identity far right
  CHECK(y[7] == 0.f);   // zero far left (-0)
  gelu.forward(Tensor<float>{{1, 8}, {nan, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f}}, y, {});
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == doctest::Approx(gelu_ref(1.0)));
  CHECK(nn::detail::activation_name(nn::Activation::GELU) == "gelu");
}

TEST_CASE("GELU: backward is dy times the erf form's derivative, from the input") {
  nn::GELU gelu;
  gelu.build({6});
  Tensor<float> x{{1, 6}, {-4.f, -0.75f, -0.1f, 0.f, 0.6f, 2.f}}, y, dx;
  const Tensor<float> dy{{1, 6}, {1.f, 2.f, -1.f, 1.f, 0.5f, 1.f}};
  gelu.forward(x, y, {});
  gelu.backward(x, y, dy, &dx);
  for (std::size_t i = 0; i < 6; ++i) {
    CAPTURE(x[i]);
    CHECK(dx[i] == doctest::Approx(dy[i] * gelu_grad_ref(x[i])).epsilon(1e-5).scale(1e-6));
  }
  CHECK(dx[3] == doctest::Approx(0.5));  // the slope at 0 is 1/2
}

TEST_CASE("GELU: gradient-checked in its layer and as Dense's fused activation") {
  nn::GELU layer;
  const auto r = strata_test::gradcheck(layer, {3, 4}, 3, {.input_scale = 3.f});
  CHECK_MESSAGE(r.ok, r.report);
  for (bool bias : {true, false})
    for (std::size_t batch : {1u, 5u}) {
      CAPTURE(bias);
      CAPTURE(batch);
      nn::Dense d{6, {.activation = nn::Activation::GELU, .use_bias = bias}};
      const auto rd = strata_test::gradcheck(d, {7}, batch);
      CHECK_MESSAGE(rd.ok, rd.report);
    }
  nn::Dense empty{4, {.activation = nn::Activation::GELU}};
  const auto re = strata_test::gradcheck(empty, {3}, 0);
  CHECK_MESSAGE(re.ok, re.report);
}

TEST_CASE("GELU's gradient without its input is an error that says so") {
  auto& c = strata::kernels::host_compute();
  std::vector<float> y(4, 0.5f), dy(4, 1.f), dz(4);
  CHECK(strata::kernels::activation_needs_input(nn::Activation::GELU));
  CHECK_FALSE(strata::kernels::activation_needs_input(nn::Activation::Tanh));
  CHECK_THROWS_WITH_AS(c.activation_backward(nn::Activation::GELU, y.data(), dy.data(), dz.data(), 2, 2),
                       doctest::Contains("needs the activation's input z"), strata::Error);
}

TEST_CASE("LayerNorm: rows normalized over the last axis, then scaled by 1 + gamma and shifted by beta") {
  nn::LayerNorm norm{{.epsilon = 1e-5f}};
  CHECK(norm.build({2, 4}) == Shape{2, 4});
  const auto specs = norm.params();
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].name == "gamma");
  CHECK(specs[0].shape == Shape{4});
  CHECK(specs[1].name == "beta");
  std::vector<float> gamma{0.f, 0.f, 0.f, 0.f}, beta{0.f, 0.f, 0.f, 0.f}, gg(4), gb(4);
  const nn::ParamRef refs[] = {{gamma, gg}, {beta, gb}};
  norm.bind(refs);
  // two samples of two rows each; the last row is constant
  Tensor<float> x{{2, 2, 4}, {1.f, 2.f, 3.f, 4.f, -10.f, 0.f, 10.f, 20.f, 100.f, 101.f, 99.f, 100.f, 7.f, 7.f, 7.f, 7.f}},
      y;
  norm.forward(x, y, {});
  for (std::size_t r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < 4; ++j) mean += x[r * 4 + j] / 4.0;
    for (std::size_t j = 0; j < 4; ++j) var += (x[r * 4 + j] - mean) * (x[r * 4 + j] - mean) / 4.0;
    for (std::size_t j = 0; j < 4; ++j) {
      CAPTURE(r);
      CAPTURE(j);
      CHECK(y[r * 4 + j] == doctest::Approx((x[r * 4 + j] - mean) / std::sqrt(var + 1e-5)).epsilon(1e-5));
    }
  }
  for (std::size_t j = 0; j < 4; ++j) CHECK(y[12 + j] == 0.f);  // a constant row: xhat = 0, y = beta

  gamma = {1.f, -1.f, 0.5f, 0.f};
  beta = {0.f, 1.f, 2.f, 3.f};
  Tensor<float> y2;
  norm.forward(x, y2, {});
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t j = 0; j < 4; ++j)
      CHECK(y2[r * 4 + j] == doctest::Approx(y[r * 4 + j] * (1.f + gamma[j]) + beta[j]).epsilon(1e-6).scale(1e-6));
}

TEST_CASE("LayerNorm: gradient-checked for input, gamma and beta on 1-D and 3-D samples and empty batches") {
  for (const Shape& s : {Shape{7}, Shape{2, 3, 5}, Shape{40}}) {
    CAPTURE(s.str());
    nn::LayerNorm norm;
    const auto r = strata_test::gradcheck(norm, s, 3);
    CHECK_MESSAGE(r.ok, r.report);
  }
  nn::LayerNorm norm;
  const auto r0 = strata_test::gradcheck(norm, {5}, 0);
  CHECK_MESSAGE(r0.ok, r0.report);
}

TEST_CASE("LayerNorm: NaN in a row makes that row NaN and leaves the others") {
  nn::LayerNorm norm;
  norm.build({3});
  std::vector<float> gamma(3, 0.f), beta(3, 0.f), gg(3), gb(3);
  const nn::ParamRef refs[] = {{gamma, gg}, {beta, gb}};
  norm.bind(refs);
  Tensor<float> x{{2, 3}, {1.f, std::numeric_limits<float>::quiet_NaN(), 2.f, 1.f, 2.f, 3.f}}, y;
  norm.forward(x, y, {});
  for (std::size_t j = 0; j < 3; ++j) CHECK(std::isnan(y[j]));
  for (std::size_t j = 3; j < 6; ++j) CHECK(std::isfinite(y[j]));
}

TEST_CASE("LayerNorm: errors name the layer and what was wrong") {
  CHECK_THROWS_WITH_AS(nn::LayerNorm({.epsilon = 0.f}), doctest::Contains("epsilon"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::LayerNorm({.epsilon = std::numeric_limits<float>::quiet_NaN()}),
                       doctest::Contains("epsilon"), strata::Error);
  nn::LayerNorm norm;
  CHECK_THROWS_WITH_AS(norm.build(Shape{4, 0}), doctest::Contains("non-empty last axis"), strata::ShapeError);
  norm.build({4});
  std::vector<float> gamma(4), beta(4), gg(4), gb(4);
  const nn::ParamRef refs[] = {{gamma, gg}, {beta, gb}};
  norm.bind(refs);
  Tensor<float> x{{2, 4}}, y{{2, 4}}, dy{{2, 4}}, dx;
  CHECK_THROWS_WITH_AS(norm.backward(x, y, dy, &dx), doctest::Contains("no forward pass"), strata::Error);
  CHECK_THROWS_AS(norm.forward(Tensor<float>{{2, 3}}, y, {}), strata::ShapeError);
}

TEST_CASE("a model with LayerNorm and GELU trains: the loss falls") {
  const std::size_t n = 64;
  Tensor<float> x{{n, 4}}, labels{{n, 1}};
  strata::Rng rng{3};
  for (std::size_t i = 0; i < n; ++i) {
    float s = 0;
    for (std::size_t j = 0; j < 4; ++j) s += (x[i * 4 + j] = 2.f * rng.uniform() - 1.f) * static_cast<float>(j + 1);
    labels[i] = std::tanh(s);
  }
  auto model = nn::Sequential{nn::Input{{4}}, nn::Dense{16, {.activation = nn::Activation::GELU}}, nn::LayerNorm{},
                              nn::Dense{16}, nn::GELU{}, nn::Dense{1}};
  model.compile(nn::Adam{0.01}, nn::MeanSquaredError{});
  const auto history = model.fit(strata::data::from_tensor_slices(x, labels).batch(16),
                                 {.epochs = 15, .verbose = nn::Verbosity::Silent});
  const auto& loss = history.at("loss");
  REQUIRE(loss.size() == 15);
  CHECK(std::isfinite(loss.back()));
  CHECK(loss.back() < 0.5 * loss.front());
}

}  // namespace layer_norm_gelu_test
