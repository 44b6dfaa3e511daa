// Losses (values, analytic vs numeric gradients, stability), metrics, and
// optimizers (against hand-computed steps; slice-wise updates equal
// whole-vector updates, which CentralStorage relies on), schedules.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <strata/kernels/bodies/optim.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/nn.hpp>

namespace optim_losses_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using strata::Tensor;

namespace {
// max |numeric - analytic| of d(loss)/d(pred), central differences in float.
double loss_grad_error(const nn::Loss& loss, Tensor<float> pred, const Tensor<float>& labels, float scale) {
  Tensor<float> d;
  loss.compute(pred, labels, &d, scale);
  double worst = 0;
  for (std::size_t i = 0; i < pred.size(); ++i) {
    const float keep = pred[i], eps = 1e-2f;
    pred[i] = keep + eps;
    const double up = loss.compute(pred, labels, nullptr, 1.f);
    pred[i] = keep - eps;
    const double down = loss.compute(pred, labels, nullptr, 1.f);
    pred[i] = keep;
    worst = std::max(worst, std::abs(scale * (up - down) / (2 * eps) - d[i]));
  }
  return worst;
}
}  // namespace

TEST_CASE("sparse categorical cross-entropy from logits: value, gradient, and no overflow on huge logits") {
  nn::SparseCategoricalCrossentropy loss{{.from_logits = true}};
  Tensor<float> logits{{2, 3}, {1.f, 2.f, 3.f, 0.5f, -1.f, 0.f}};
  Tensor<float> labels{{2}, {2.f, 0.f}};
  const double l0 = std::log(std::exp(1.) + std::exp(2.) + std::exp(3.)) - 3.;
  const double l1 = std::log(std::exp(.5) + std::exp(-1.) + 1.) - .5;
  CHECK(loss.compute(logits, labels, nullptr, 1.f) == doctest::Approx(l0 + l1).epsilon(1e-6));
  CHECK(loss_grad_error(loss, logits, labels, 0.25f) < 1e-3);
  // scale multiplies the gradient, not the value
  Tensor<float> d1, d2;
  loss.compute(logits, labels, &d1, 1.f);
  loss.compute(logits, labels, &d2, 0.5f);
  for (std::size_t i = 0; i < d1.size(); ++i) CHECK(d2[i] == doctest::Approx(0.5f * d1[i]));
  // a naive softmax would overflow at 1000
  Tensor<float> huge{{1, 3}, {1000.f, 0.f, -1000.f}};
  Tensor<float> d;
  CHECK(loss.compute(huge, Tensor<float>{{1}, {1.f}}, &d, 1.f) == doctest::Approx(1000.0));
  for (float g : d) CHECK(std::isfinite(g));
  CHECK(d[0] == doctest::Approx(1.f));
  CHECK(d[1] == doctest::Approx(-1.f));
}

TEST_CASE("sparse categorical cross-entropy from probabilities clips, and rejects labels that are not classes") {
  nn::SparseCategoricalCrossentropy loss;
  Tensor<float> probs{{2, 2}, {0.25f, 0.75f, 0.f, 1.f}};
  const double v = loss.compute(probs, Tensor<float>{{2}, {1.f, 0.f}}, nullptr, 1.f);
  CHECK(v == doctest::Approx(-std::log(0.75) - std::log(1e-7)).epsilon(1e-4));  // 0 clipped to 1e-7: finite
  CHECK(loss_grad_error(loss, Tensor<float>{{1, 3}, {0.2f, 0.3f, 0.5f}}, Tensor<float>{{1}, {1.f}}, 1.f) < 1e-2);
  CHECK_THROWS_WITH_AS(loss.compute(probs, Tensor<float>{{2}, {1.f, 2.f}}, nullptr, 1.f),
                       doctest::Contains("label 2.000000 of example 1 is not a class index in [0, 2)"), strata::Error);
  CHECK_THROWS_WITH_AS(loss.compute(probs, Tensor<float>{{2}, {1.f, 0.5f}}, nullptr, 1.f),
                       doctest::Contains("not a class index"), strata::Error);
  CHECK_THROWS_AS(loss.compute(probs, Tensor<float>{{3}}, nullptr, 1.f), strata::ShapeError);
}

TEST_CASE("categorical cross-entropy and MSE: values and gradients") {
  nn::CategoricalCrossentropy logits_loss{{.from_logits = true}};
  Tensor<float> z{{2, 3}, {0.1f, -0.4f, 2.f, 1.f, 1.f, 0.f}};
  Tensor<float> onehot{{2, 3}, {0.f, 0.f, 1.f, 0.f, 1.f, 0.f}};
  nn::SparseCategoricalCrossentropy sparse{{.from_logits = true}};
  CHECK(logits_loss.compute(z, onehot, nullptr, 1.f) ==
        doctest::Approx(sparse.compute(z, Tensor<float>{{2}, {2.f, 1.f}}, nullptr, 1.f)));
  CHECK(loss_grad_error(logits_loss, z, onehot, 1.f) < 1e-3);
  nn::CategoricalCrossentropy probs_loss;
  Tensor<float> p{{1, 3}, {0.2f, 0.3f, 0.5f}};
  CHECK(probs_loss.compute(p, Tensor<float>{{1, 3}, {0.f, 1.f, 0.f}}, nullptr, 1.f) == doctest::Approx(-std::log(0.3)));
  CHECK_THROWS_AS(probs_loss.compute(p, Tensor<float>{{1, 2}}, nullptr, 1.f), strata::ShapeError);

  nn::MeanSquaredError mse;
  Tensor<float> pred{{2, 2}, {1.f, 2.f, 3.f, 4.f}}, y{{2, 2}, {0.f, 2.f, 3.f, 6.f}};
  CHECK(mse.compute(pred, y, nullptr, 1.f) == doctest::Approx((1.0 + 0) / 2 + (0 + 4.0) / 2));
  CHECK(loss_grad_error(mse, pred, y, 0.5f) < 1e-3);
}

TEST_CASE("empty batches: zero loss, empty gradient") {
  nn::SparseCategoricalCrossentropy loss{{.from_logits = true}};
  Tensor<float> d;
  CHECK(loss.compute(Tensor<float>{{0, 10}}, Tensor<float>{{0}}, &d, 1.f) == 0.0);
  CHECK(d.shape() == strata::Shape{0, 10});
  CHECK(nn::MeanSquaredError{}.compute(Tensor<float>{{0, 1}}, Tensor<float>{{0, 1}}, nullptr, 1.f) == 0.0);
}

TEST_CASE("accuracy follows the loss's labels: sparse, categorical, binary") {
  Tensor<float> pred{{3, 3}, {0.1f, 0.8f, 0.1f, 0.6f, 0.3f, 0.1f, 0.2f, 0.2f, 0.6f}};
  nn::Accuracy acc;
  acc.set_loss(nn::SparseCategoricalCrossentropy{});
  CHECK(acc.total(pred, Tensor<float>{{3}, {1.f, 0.f, 0.f}}) == 2.0);
  acc.set_loss(nn::CategoricalCrossentropy{});
  CHECK(acc.total(pred, Tensor<float>{{3, 3}, {0, 1, 0, 0, 0, 1, 0, 0, 1}}) == 2.0);
  acc.set_loss(nn::MeanSquaredError{});
  CHECK(acc.total(Tensor<float>{{4, 1}, {0.9f, 0.2f, 0.7f, 0.4f}}, Tensor<float>{{4, 1}, {1, 0, 0, 1}}) == 2.0);
  CHECK(nn::SparseCategoricalAccuracy{}.total(pred, Tensor<float>{{3}, {1.f, 0.f, 2.f}}) == 3.0);
  CHECK(nn::MeanLoss{nn::MeanSquaredError{}}.name() == "mean_squared_error");
}

TEST_CASE("SGD, momentum and Nesterov take the steps Keras takes") {
  std::vector<float> w{1.f}, g{0.5f};
  nn::SGD plain{0.1};
  auto st = plain.make_state(1);
  plain.apply(w, g, st, 0, 0);
  CHECK(w[0] == doctest::Approx(0.95f));

  nn::SGD mom{0.1, {.momentum = 0.9f}};
  w = {1.f};
  st = mom.make_state(1);
  mom.apply(w, g, st, 0, 0);  // v = -0.05, w = 0.95
  mom.apply(w, g, st, 0, 1);  // v = -0.045 - 0.05 = -0.095, w = 0.855
  CHECK(w[0] == doctest::Approx(0.855f));

  nn::SGD nest{0.1, {.momentum = 0.9f, .nesterov = true}};
  w = {1.f};
  st = nest.make_state(1);
  nest.apply(w, g, st, 0, 0);  // v = -0.05, w += 0.9 * -0.05 - 0.05 = 0.905
  CHECK(w[0] == doctest::Approx(0.905f));
  CHECK_THROWS_AS(nn::SGD(0.1, {.momentum = 1.5f}), strata::Error);
  CHECK_THROWS_AS(nn::SGD(0.1, {.nesterov = true}), strata::Error);
}

TEST_CASE("Adam: first steps match the closed form") {
  nn::Adam adam{0.1};
  std::vector<float> w{1.f}, g{2.f};
  auto st = adam.make_state(1);
  adam.apply(w, g, st, 0, 0);
  // step 1: m = 0.2, v = 0.004; lr_t = 0.1 * sqrt(0.001) / 0.1; w -= lr_t * m / (sqrt(v) + eps) = 0.1
  CHECK(w[0] == doctest::Approx(0.9f).epsilon(1e-5));
  adam.apply(w, g, st, 0, 1);  // constant gradient: every step moves by ~lr
  CHECK(w[0] == doctest::Approx(0.8f).epsilon(1e-4));
}

TEST_CASE("slice-wise updates with offsets equal whole-vector updates (CentralStorage relies on it)") {
  for (const nn::Optimizer* opt : std::initializer_list<const nn::Optimizer*>{
           new nn::SGD{0.05, {.momentum = 0.8f, .nesterov = true}}, new nn::Adam{0.01}}) {
    const std::size_t n = 37;
    std::vector<float> a(n), b(n), g(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] = 0.1f * static_cast<float>(i), g[i] = std::sin(float(i));
    auto sa = opt->make_state(n), sb = opt->make_state(n);
    for (std::int64_t step = 0; step < 3; ++step) {
      opt->apply(a, g, sa, 0, step);
      opt->apply(std::span(b).subspan(0, 10), std::span<const float>(g).subspan(0, 10), sb, 0, step);
      opt->apply(std::span(b).subspan(10), std::span<const float>(g).subspan(10), sb, 10, step);
    }
    CHECK(a == b);
    delete opt;
  }
}

TEST_CASE("learning-rate schedules") {
  nn::LearningRate constant = 0.5;
  CHECK(constant(0) == 0.5f);
  CHECK(constant(1000) == 0.5f);
  nn::LearningRate exp = nn::ExponentialDecay{1.f, 10, 0.5f};
  CHECK(exp(10) == doctest::Approx(0.5f));
  CHECK(exp(5) == doctest::Approx(std::sqrt(0.5f)));
  nn::LearningRate stair = nn::ExponentialDecay{1.f, 10, 0.5f, true};
  CHECK(stair(19) == doctest::Approx(0.5f));
  nn::LearningRate pw = nn::PiecewiseConstantDecay{{10, 20}, {1.f, 0.5f, 0.1f}};
  CHECK(pw(10) == 1.f);
  CHECK(pw(11) == 0.5f);
  CHECK(pw(100) == 0.1f);
  CHECK_THROWS_AS((void)nn::LearningRate(nn::PiecewiseConstantDecay{{10}, {1.f}})(0), strata::Error);
  // a schedule drives the optimizer by step
  nn::SGD sgd{nn::PiecewiseConstantDecay{{0}, {1.f, 0.f}}};
  std::vector<float> w{1.f}, g{1.f};
  auto st = sgd.make_state(1);
  sgd.apply(w, g, st, 0, 0);
  sgd.apply(w, g, st, 0, 1);
  CHECK(w[0] == 0.f);
}

TEST_CASE("a NaN prediction gives a NaN loss and a NaN metric: never a silently finite one") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // from logits: a NaN in any class, the label's or another
  nn::SparseCategoricalCrossentropy logits{{.from_logits = true}};
  Tensor<float> d;
  CHECK(std::isnan(logits.compute(Tensor<float>{{2, 3}, {1.f, nan, 2.f, 1.f, 2.f, 3.f}}, Tensor<float>{{2}, {0.f, 1.f}},
                                  &d, 0.5f)));
  CHECK(std::isnan(d[0]));  // the gradient of that row carries the NaN to the weights' gradient
  CHECK(std::isfinite(d[3]));
  // from probabilities: a NaN in a class other than the label's still makes the loss NaN
  nn::SparseCategoricalCrossentropy probs;
  CHECK(std::isnan(probs.compute(Tensor<float>{{1, 3}, {0.5f, nan, 0.2f}}, Tensor<float>{{1}, {0.f}}, nullptr, 1.f)));
  CHECK(std::isnan(probs.compute(Tensor<float>{{1, 3}, {nan, 0.3f, 0.2f}}, Tensor<float>{{1}, {0.f}}, nullptr, 1.f)));
  CHECK(std::isfinite(probs.compute(Tensor<float>{{1, 3}, {0.5f, 0.3f, 0.2f}}, Tensor<float>{{1}, {0.f}}, nullptr, 1.f)));
  for (bool from_logits : {false, true}) {
    nn::CategoricalCrossentropy cc{{.from_logits = from_logits}};
    CHECK(std::isnan(cc.compute(Tensor<float>{{1, 3}, {0.5f, nan, 0.2f}}, Tensor<float>{{1, 3}, {1, 0, 0}}, nullptr, 1.f)));
  }
  CHECK(std::isnan(nn::MeanSquaredError{}.compute(Tensor<float>{{1, 2}, {nan, 0.f}}, Tensor<float>{{1, 2}, {0, 0}},
                                                  nullptr, 1.f)));
  // a row whose prediction holds a NaN is neither a hit nor a miss: the metric is NaN
  nn::Accuracy acc;
  acc.set_loss(nn::SparseCategoricalCrossentropy{});
  const Tensor<float> pred{{2, 3}, {nan, 0.f, 0.f, 0.1f, 0.8f, 0.1f}};
  CHECK(std::isnan(acc.total(pred, Tensor<float>{{2}, {0.f, 1.f}})));
  CHECK(std::isnan(nn::SparseCategoricalAccuracy{}.total(pred, Tensor<float>{{2}, {0.f, 1.f}})));
  CHECK(std::isnan(nn::CategoricalAccuracy{}.total(pred, Tensor<float>{{2, 3}, {1, 0, 0, 0, 1, 0}})));
  acc.set_loss(nn::MeanSquaredError{});
  CHECK(std::isnan(acc.total(Tensor<float>{{2, 1}, {nan, 0.9f}}, Tensor<float>{{2, 1}, {1, 1}})));
  // a NaN label is not a class index: the error says so (converting it was undefined behaviour)
  CHECK_THROWS_WITH_AS(logits.compute(Tensor<float>{{1, 3}, {1.f, 2.f, 3.f}}, Tensor<float>{{1}, {nan}}, nullptr, 1.f),
                       doctest::Contains("is not a class index"), strata::Error);
}

TEST_CASE("count_nonfinite counts NaN and both infinities, nothing else") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(37, 1.f);
  x[3] = nan;
  x[17] = -inf;
  x[36] = inf;
  x[5] = std::numeric_limits<float>::max();
  x[6] = std::numeric_limits<float>::denorm_min();
  x[7] = -0.f;
  double acc = 1;
  strata::kernels::host_compute().count_nonfinite(x.data(), x.size(), &acc);
  CHECK(acc == 4.0);  // adds to what was there
  CHECK(strata::kernels::host::count_nonfinite(x.data(), 3) == 0);
}

// The host's SSE fast path for Adam against the element body every other
// place runs (its scalar tail, the CUDA kernel): the same bits, element by
// element, for lengths that leave every tail size.
TEST_CASE("Adam's SSE fast path equals bodies::AdamElement bit for bit") {
  const strata::kernels::AdamStep step{.lr_t = 3e-3f, .beta_1 = 0.9f, .beta_2 = 0.999f, .epsilon = 1e-7f};
  for (std::size_t n : {1u, 3u, 4u, 7u, 64u, 1027u}) {
    CAPTURE(n);
    std::vector<float> w(n), g(n), m(n), v(n);
    strata::Rng rng{n};
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = 2.f * rng.uniform() - 1.f;
      g[i] = (2.f * rng.uniform() - 1.f) * (i % 5 == 0 ? 1e3f : 1e-2f);
      m[i] = 0.1f * rng.uniform();
      v[i] = 0.01f * rng.uniform();
    }
    auto w2 = w, m2 = m, v2 = v;
    strata::kernels::host::adam(w.data(), g.data(), m.data(), v.data(), n, step);  // SSE, then the tail
    const strata::kernels::bodies::AdamElement body{step};
    for (std::size_t i = 0; i < n; ++i) body(w2[i], g[i], m2[i], v2[i]);
    CHECK(std::memcmp(w.data(), w2.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(m.data(), m2.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(v.data(), v2.data(), n * sizeof(float)) == 0);
    CHECK(w != std::vector<float>(w2.size(), 0.f));
  }
}

}  // namespace optim_losses_test
