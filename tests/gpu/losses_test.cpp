// CudaCompute's losses and metrics against the host compute: fused
// softmax + cross-entropy + gradient per row, MSE, hit counts (exact, with
// std::max_element's ties and NaN), the L2 sum, and labels that name no
// class (counted into *invalid on the GPU; the host throws).

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <strata/cuda/compute.hpp>
#include <strata/kernels/host/compute.hpp>

#include "gpu_util.hpp"

namespace losses_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

using namespace gpu_test;

namespace {
std::vector<float> labels_for(std::size_t rows, std::size_t classes, unsigned seed) {
  std::vector<float> l(rows);
  for (std::size_t i = 0; i < rows; ++i) l[i] = static_cast<float>((i * 7 + seed) % classes);
  return l;
}
std::vector<float> one_hot(const std::vector<float>& l, std::size_t classes) {
  std::vector<float> y(l.size() * classes);
  for (std::size_t i = 0; i < l.size(); ++i) y[i * classes + static_cast<std::size_t>(l[i])] = 1.f;
  return y;
}
std::vector<float> probabilities(std::size_t rows, std::size_t classes, unsigned seed) {
  auto p = random_floats(rows * classes, seed, 0.f, 1.f);
  host().bias_activate(strata::kernels::Activation::Softmax, p.data(), nullptr, p.data(), rows, classes);
  p[0] = 0.f;  // clipped to epsilon: a loss, no gradient
  return p;
}
}  // namespace

TEST_CASE("sparse and categorical cross-entropy: loss and gradient, from logits and from probabilities") {
  for (std::size_t classes : {std::size_t{10}, std::size_t{45}}) {
    const std::size_t rows = 300;
    const float scale = 1.f / rows;
    const auto labels = labels_for(rows, classes, 3);
    const auto soft = probabilities(rows, classes, 13);  // also soft labels for the categorical loss
    for (bool logits : {true, false}) {
      CAPTURE(classes);
      CAPTURE(logits);
      const auto pred = logits ? random_floats(rows * classes, 12, -5.f, 5.f) : probabilities(rows, classes, 14);
      Dev<float> dp(gpu(), pred), dl(gpu(), labels), dd(gpu(), rows * classes);
      Dev<double> acc(gpu(), 2);
      std::vector<float> d(rows * classes);
      double want = 0;
      host().sparse_crossentropy(pred.data(), labels.data(), d.data(), scale, rows, classes, logits, &want, nullptr);
      gpu().sparse_crossentropy(dp, dl, dd, scale, rows, classes, logits, acc.get(), acc.get() + 1);
      auto got = acc.read();
      CHECK(close(got[0], want, 1e-5));
      CHECK(got[1] == 0);
      check_close(dd.read(), d, 1e-5, 1e-7, "sparse crossentropy gradient");

      for (const auto* y : {&soft, static_cast<const std::vector<float>*>(nullptr)}) {
        const auto targets = y ? *y : one_hot(labels, classes);
        Dev<float> dt(gpu(), targets);
        Dev<double> cacc(gpu(), 1);
        double cwant = 0;
        host().categorical_crossentropy(pred.data(), targets.data(), d.data(), scale, rows, classes, logits, &cwant);
        gpu().categorical_crossentropy(dp, dt, dd, scale, rows, classes, logits, cacc.get());
        CHECK(close(cacc.read()[0], cwant, 1e-5));
        check_close(dd.read(), d, 1e-5, 1e-7, "categorical crossentropy gradient");
        gpu().categorical_crossentropy(dp, dt, nullptr, scale, rows, classes, logits, cacc.get());  // no gradient
        CHECK(close(cacc.read()[0], 2 * cwant, 1e-5));
      }
    }
  }
}

TEST_CASE("a label that names no class is counted, adds no loss and gets a zero gradient") {
  const std::size_t rows = 6, classes = 4;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> labels{1.f, 2.5f, -1.f, 4.f, nan, 3.f};  // rows 1 to 4 are invalid
  const auto pred = random_floats(rows * classes, 15);
  std::vector<float> valid_pred(pred.begin(), pred.begin() + classes);
  valid_pred.insert(valid_pred.end(), pred.end() - classes, pred.end());
  const std::vector<float> valid_labels{1.f, 3.f};
  double want = 0, want_hits = 0;
  host().sparse_crossentropy(valid_pred.data(), valid_labels.data(), nullptr, 1.f, 2, classes, true, &want, nullptr);
  host().sparse_hits(valid_pred.data(), valid_labels.data(), 2, classes, &want_hits, nullptr);
  CHECK_THROWS_AS(host().sparse_crossentropy(pred.data(), labels.data(), nullptr, 1.f, rows, classes, true, &want,
                                             nullptr),
                  strata::Error);  // the host's rule: it stops at once

  Dev<float> dp(gpu(), pred), dl(gpu(), labels), dd(gpu(), rows * classes, 9.f);
  Dev<double> acc(gpu(), 4);
  gpu().sparse_crossentropy(dp, dl, dd, 1.f, rows, classes, true, acc.get(), acc.get() + 1);
  gpu().sparse_hits(dp, dl, rows, classes, acc.get() + 2, acc.get() + 3);
  const auto got = acc.read();
  CHECK(close(got[0], want, 1e-6));
  CHECK(got[1] == 4);
  CHECK(got[2] == want_hits);
  CHECK(got[3] == 4);
  const auto d = dd.read();
  for (std::size_t i = classes; i < 5 * classes; ++i) CHECK(d[i] == 0.f);
}

TEST_CASE("mean squared error and the L2 sum") {
  const std::size_t rows = 129, width = 70;
  const auto pred = random_floats(rows * width, 16), labels = random_floats(rows * width, 17);
  std::vector<float> d(rows * width);
  double want = 0;
  host().mean_squared_error(pred.data(), labels.data(), d.data(), 0.25f, rows, width, &want);
  Dev<float> dp(gpu(), pred), dl(gpu(), labels), dd(gpu(), rows * width);
  Dev<double> acc(gpu(), 2);
  gpu().mean_squared_error(dp, dl, dd, 0.25f, rows, width, acc.get());
  gpu().add_square_sum(dp, rows * width, 0.01f, acc.get() + 1);
  double want_sq = 0;
  host().add_square_sum(pred.data(), rows * width, 0.01f, &want_sq);
  const auto got = acc.read();
  CHECK(close(got[0], want, 1e-9));  // double sums of exact float squares: only the order differs
  CHECK(close(got[1], want_sq, 1e-9));
  check_bitwise(dd.read(), d, "mse gradient");
}

TEST_CASE("hit counts are exact, with std::max_element's ties") {
  const std::size_t classes = 5;
  std::vector<float> pred{
      0.f, 3.f, 3.f, 1.f, 0.f,    // tie: the first maximum (1)
      -1.f, -2.f, -3.f, -4.f, -5.f,
  };
  const auto more = random_floats(500 * classes, 18);
  pred.insert(pred.end(), more.begin(), more.end());
  const std::size_t rows = pred.size() / classes;
  auto labels = labels_for(rows, classes, 1);
  labels[0] = 1.f, labels[1] = 0.f;
  const auto targets = one_hot(labels_for(rows, classes, 2), classes);
  double want[3] = {0, 0, 0};
  host().sparse_hits(pred.data(), labels.data(), rows, classes, &want[0], nullptr);
  host().categorical_hits(pred.data(), targets.data(), rows, classes, &want[1]);
  host().binary_hits(pred.data(), targets.data(), pred.size(), &want[2]);
  CHECK(want[0] >= 2);
  Dev<float> dp(gpu(), pred), dl(gpu(), labels), dt(gpu(), targets);
  Dev<double> acc(gpu(), 4);
  gpu().sparse_hits(dp, dl, rows, classes, acc.get(), acc.get() + 3);
  gpu().categorical_hits(dp, dt, rows, classes, acc.get() + 1);
  gpu().binary_hits(dp, dt, pred.size(), acc.get() + 2);
  const auto got = acc.read();
  CHECK(got[0] == want[0]);
  CHECK(got[1] == want[1]);
  CHECK(got[2] == want[2]);
  CHECK(got[3] == 0);
}

TEST_CASE("a NaN prediction makes the loss and the hit counts NaN, as on the host") {
  const std::size_t classes = 5, rows = 300;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto pred = random_floats(rows * classes, 21);
  pred[7 * classes + 3] = nan;  // row 7, not the label's class
  auto labels = labels_for(rows, classes, 1);
  labels[7] = 0.f;
  const auto targets = one_hot(labels, classes);
  auto probs = probabilities(rows, classes, 22);
  probs[9 * classes + 4] = nan;
  labels[9] = 1.f;
  Dev<float> dp(gpu(), pred), dq(gpu(), probs), dl(gpu(), labels), dt(gpu(), targets), dd(gpu(), rows * classes);
  Dev<double> acc(gpu(), 8);
  gpu().sparse_crossentropy(dp, dl, dd, 1.f, rows, classes, true, acc.get(), acc.get() + 7);
  gpu().sparse_crossentropy(dq, dl, nullptr, 1.f, rows, classes, false, acc.get() + 1, acc.get() + 7);
  gpu().categorical_crossentropy(dp, dt, nullptr, 1.f, rows, classes, true, acc.get() + 2);
  gpu().sparse_hits(dp, dl, rows, classes, acc.get() + 3, acc.get() + 7);
  gpu().categorical_hits(dp, dt, rows, classes, acc.get() + 4);
  gpu().binary_hits(dp, dt, rows * classes, acc.get() + 5);
  gpu().count_nonfinite(dp, rows * classes, acc.get() + 6);
  const auto got = acc.read();
  for (int k = 0; k < 6; ++k) {
    CAPTURE(k);
    CHECK(std::isnan(got[static_cast<std::size_t>(k)]));
  }
  CHECK(got[6] == 1.0);
  CHECK(got[7] == 0.0);
  double want = 0;
  host().sparse_hits(pred.data(), labels.data(), rows, classes, &want, nullptr);
  CHECK(std::isnan(want));
}

TEST_CASE("count_nonfinite counts NaN and both infinities exactly, as the host") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto x = random_floats(1 << 20, 23);
  for (std::size_t i = 5; i < x.size(); i += 4099) x[i] = (i % 3 == 0) ? nan : (i % 3 == 1 ? inf : -inf);
  x[1] = std::numeric_limits<float>::max();
  double want = 0;
  host().count_nonfinite(x.data(), x.size(), &want);
  CHECK(want > 200);
  Dev<float> dx(gpu(), x);
  Dev<double> acc(gpu(), 1, 2.0);
  gpu().count_nonfinite(dx, x.size(), acc.get());
  gpu().count_nonfinite(dx, 0, acc.get());
  CHECK(acc.read()[0] == want + 2.0);
}

}  // namespace losses_gpu_test
