// A GPU's grid on its stand-in (kernels/host/grid_loops.hpp): the sparse
// cross-entropy rows, the accuracy count, the column sums and the
// non-finite count, run by DeviceStandIn over the bodies and the rows,
// lanes, blocks and chunks of the CUDA kernels, against the host's own
// loops (HostCompute) on odd sizes, empty batches, NaN rows and labels that
// name no class. In a GPU's order (DenseOrder::Device) within rounding (or
// exactly, where every partial sum is exact); in the host's, bitwise.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/kernels/host/device_stand_in.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/device/device_compute.hpp>

namespace stand_in_grid_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace k = strata::kernels;
namespace nn = strata::nn;

namespace {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

std::vector<float> uniform(std::size_t n, float lo, float hi, std::uint64_t seed) {
  nn::Rng rng{seed};
  std::vector<float> v(n);
  for (auto& x : v) x = lo + (hi - lo) * rng.uniform();
  return v;
}

//! Rows of probabilities (each row sums to 1), one value per few rows at 0 or 1 (clipped: no gradient).
std::vector<float> probabilities(std::size_t rows, std::size_t classes, std::uint64_t seed) {
  auto p = uniform(rows * classes, 0.01f, 1.f, seed);
  for (std::size_t r = 0; r < rows; ++r) {
    float s = 0.f;
    for (std::size_t j = 0; j < classes; ++j) s += p[r * classes + j];
    for (std::size_t j = 0; j < classes; ++j) p[r * classes + j] /= s;
  }
  if (rows > 2) p[2 * classes] = classes == 1 ? 1.f : 0.f;
  return p;
}

std::vector<float> labels_for(std::size_t rows, std::size_t classes) {
  std::vector<float> y(rows);
  for (std::size_t r = 0; r < rows; ++r) y[r] = static_cast<float>((r * 7 + 3) % classes);
  if (rows > 2) y[2] = 0.f;  // row 2's clipped value is its label's
  return y;
}

struct Loss {
  double loss = 0, invalid = 0;
  std::vector<float> d;
};
Loss sparse_loss(k::Compute& c, const std::vector<float>& p, const std::vector<float>& y, std::size_t classes,
                 bool logits, float scale = 0.25f) {
  Loss out;
  out.d.assign(p.size(), 99.f);
  c.sparse_crossentropy(p.data(), y.data(), out.d.data(), scale, y.size(), classes, logits, &out.loss, &out.invalid);
  return out;
}

double hits(k::Compute& c, const std::vector<float>& p, const std::vector<float>& y, std::size_t classes,
            double* invalid = nullptr) {
  double acc = 0;
  c.sparse_hits(p.data(), y.data(), y.size(), classes, &acc, invalid);
  return acc;
}

}  // namespace

TEST_CASE("the stand-in's sparse cross-entropy rows: the host's within rounding in a GPU's order, its bits in the host's") {
  k::HostCompute host;
  k::DeviceStandIn gpu{0, k::DenseOrder::Device}, host_order{0};
  for (std::size_t rows : {0, 1, 7, 9, 17, 40})
    for (std::size_t classes : {1, 2, 10, 33, 70})
      for (bool logits : {true, false}) {
        CAPTURE(rows);
        CAPTURE(classes);
        CAPTURE(logits);
        const auto p = logits ? uniform(rows * classes, -6.f, 6.f, rows * 100 + classes)
                              : probabilities(rows, classes, rows * 100 + classes);
        const auto y = labels_for(rows, classes);
        const Loss want = sparse_loss(host, p, y, classes, logits);
        const Loss got = sparse_loss(gpu, p, y, classes, logits);
        CHECK(got.invalid == 0);
        CHECK(got.loss == doctest::Approx(want.loss).epsilon(1e-6).scale(1.0));
        float worst = 0.f;
        for (std::size_t i = 0; i < p.size(); ++i) worst = std::max(worst, std::abs(got.d[i] - want.d[i]));
        CHECK(worst <= 1e-6f);
        const Loss same = sparse_loss(host_order, p, y, classes, logits);
        CHECK(same.loss == want.loss);
        CHECK(same.d == want.d);
      }
}

TEST_CASE("the stand-in's loss and accuracy: a NaN in any lane makes the row NaN; labels that name no class are counted") {
  k::HostCompute host;
  k::DeviceStandIn gpu{0, k::DenseOrder::Device};
  const std::size_t classes = 33;  // two lanes' passes: column 32 is lane 0's second element
  for (bool logits : {true, false}) {
    CAPTURE(logits);
    auto p = logits ? uniform(9 * classes, -3.f, 3.f, 5) : probabilities(9, classes, 5);
    auto y = labels_for(9, classes);
    p[4 * classes + 32] = nan_f;  // row 4, not at its label
    const Loss got = sparse_loss(gpu, p, y, classes, logits);
    CHECK(std::isnan(got.loss));
    CHECK(std::isnan(sparse_loss(host, p, y, classes, logits).loss));
    CHECK(std::isnan(hits(gpu, p, y, classes)));
    CHECK(std::isnan(hits(host, p, y, classes)));
    p[4 * classes + 32] = 0.5f;

    // rows 1, 5 and 8 name no class: counted, no loss, no hit, a zero gradient; the others are the host's rows
    y[1] = static_cast<float>(classes);
    y[5] = 1.5f;
    y[8] = nan_f;
    std::vector<float> kept_p, kept_y;
    for (std::size_t r = 0; r < y.size(); ++r)
      if (r != 1 && r != 5 && r != 8) {
        kept_p.insert(kept_p.end(), p.begin() + static_cast<std::ptrdiff_t>(r * classes),
                      p.begin() + static_cast<std::ptrdiff_t>((r + 1) * classes));
        kept_y.push_back(y[r]);
      }
    const Loss bad = sparse_loss(gpu, p, y, classes, logits);
    CHECK(bad.invalid == 3);
    CHECK(bad.loss == doctest::Approx(sparse_loss(host, kept_p, kept_y, classes, logits).loss).epsilon(1e-6));
    for (std::size_t r : {1, 5, 8})
      for (std::size_t j = 0; j < classes; ++j) CHECK(bad.d[r * classes + j] == 0.f);
    double invalid = 0;
    CHECK(hits(gpu, p, y, classes, &invalid) == hits(host, kept_p, kept_y, classes));
    CHECK(invalid == 3);
    CHECK_THROWS_AS(sparse_loss(host, p, y, classes, logits), strata::Error);  // the host refuses them
  }
}

TEST_CASE("the stand-in's accuracy count over blocks of rows: the host's count exactly") {
  k::HostCompute host;
  k::DeviceStandIn gpu{0, k::DenseOrder::Device};
  for (std::size_t rows : {0, 1, 255, 256, 257, 600})
    for (std::size_t classes : {1, 3, 10}) {
      CAPTURE(rows);
      CAPTURE(classes);
      auto p = uniform(rows * classes, 0.f, 1.f, rows + classes);
      for (std::size_t r = 0; r < rows; r += 5) p[r * classes] = p[r * classes + classes - 1] = 2.f;  // ties: the first wins
      const auto y = labels_for(rows, classes);
      double invalid = 0;
      const double got = hits(gpu, p, y, classes, &invalid);
      CHECK(got == hits(host, p, y, classes));
      CHECK(invalid == 0);
    }
  double acc = 5;
  gpu.sparse_hits(nullptr, nullptr, 10, 0, &acc, nullptr);  // no classes: nothing counted, nothing read
  CHECK(acc == 5);
}

TEST_CASE("the stand-in's column sums by chunks and lanes: exact on integers, within rounding otherwise") {
  k::HostCompute host;
  k::DeviceStandIn gpu{0, k::DenseOrder::Device}, host_order{0};
  for (std::size_t rows : {0, 1, 7, 8, 9, 511, 512, 513, 1100, 600000})
    for (std::size_t cols : {1, 3, 31, 33}) {
      if (rows == 600000 && cols > 3) continue;
      CAPTURE(rows);
      CAPTURE(cols);
      auto x = uniform(rows * cols, -8.f, 8.f, rows * 7 + cols);
      std::vector<float> ints(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) ints[i] = std::round(x[i]);  // every partial sum exact
      std::vector<float> want(cols), got(cols, 7.f), same(cols, 7.f);
      host.column_sums(ints.data(), want.data(), rows, cols);
      gpu.column_sums(ints.data(), got.data(), rows, cols);
      CHECK(got == want);
      host.column_sums(x.data(), want.data(), rows, cols);
      gpu.column_sums(x.data(), got.data(), rows, cols);
      host_order.column_sums(x.data(), same.data(), rows, cols);
      CHECK(same == want);
      for (std::size_t j = 0; j < cols; ++j) CHECK(got[j] == doctest::Approx(want[j]).epsilon(1e-5).scale(8.0 * static_cast<double>(rows) + 1));
    }
}

TEST_CASE("the stand-in's non-finite count over a grid-stride grid: the host's count in either order") {
  k::DeviceStandIn gpu{0, k::DenseOrder::Device}, host_order{0};
  const std::size_t stride = std::size_t{k::bodies::reduce_blocks} * k::bodies::block_threads;
  for (std::size_t n : std::vector<std::size_t>{0, 1, 255, 257, stride - 1, stride + 5, 3 * stride + 17}) {
    CAPTURE(n);
    auto x = uniform(n, -1.f, 1.f, n);
    for (std::size_t i : {std::size_t{0}, n / 2, n - 1, stride, stride + 1, 2 * stride + 3})
      if (i < n) x[i] = (i % 3 == 0) ? nan_f : (i % 3 == 1 ? inf_f : -inf_f);
    const double want = 2.0 + static_cast<double>(k::host::count_nonfinite(x.data(), n));
    for (k::Compute* c : {static_cast<k::Compute*>(&gpu), static_cast<k::Compute*>(&host_order)}) {
      double acc = 2;
      c->count_nonfinite(x.data(), n, &acc);
      CHECK(acc == want);
    }
    if (n > 2 * stride + 3) CHECK(want == 2.0 + 6);
  }
}

namespace {
std::unique_ptr<k::Compute> device_order(int device, strata::MatmulPrecision) {
  return std::make_unique<k::DeviceStandIn>(device, k::DenseOrder::Device);
}
}  // namespace

TEST_CASE("a GPU step on the stand-in counts labels that name no class and says so, as a GPU does") {
  auto& backend = strata::detail::gpu_backend();
  const auto saved = backend;
  backend.make = &device_order;
  backend.make_collectives = nullptr;
  strata::Tensor<float> x{{16, 4}};
  strata::Tensor<std::int32_t> y{{16}};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) / 7.f;
  for (std::size_t i = 0; i < 16; ++i) y[i] = static_cast<std::int32_t>(i % 3);
  y[5] = 7;
  y[9] = -1;
  strata::OneDeviceStrategy s{strata::gpu(0)};
  auto model = s.scope([] { return nn::Sequential{nn::Input{{4}}, nn::Dense{3}}; });
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  CHECK_THROWS_WITH_AS(model.fit(s.distribute(strata::data::from_tensor_slices(x, y).batch(16)),
                                 {.epochs = 1, .verbose = nn::Verbosity::Silent}),
                       doctest::Contains("2 of 16 labels of the batch are not class indices in [0, 3) (counted on "
                                         "stand-in GPU 0 (host memory))"),
                       std::exception);
  // with two sparse metrics beside the loss: still the batch's 2 (each accumulator counts apart), named by the
  // loss; and under a mirrored pair, each replica's own rows (2 bad labels of replica 0's 8)
  auto counted = s.scope([] { return nn::Sequential{nn::Input{{4}}, nn::Dense{3}}; });
  counted.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}},
                  {nn::Accuracy{}, nn::SparseCategoricalAccuracy{}});
  CHECK_THROWS_WITH_AS(counted.fit(s.distribute(strata::data::from_tensor_slices(x, y).batch(16)),
                                   {.epochs = 1, .verbose = nn::Verbosity::Silent}),
                       doctest::Contains("sparse_categorical_crossentropy: 2 of 16 labels"), std::exception);
  strata::MirroredStrategy two{strata::virtual_gpus(0, 2)};
  auto mirrored = two.scope([] { return nn::Sequential{nn::Input{{4}}, nn::Dense{3}}; });
  mirrored.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}},
                   {nn::SparseCategoricalAccuracy{}});
  y[9] = 1;  // replica 0 takes rows 0..7: one bad label (row 5); replica 1's rows are good
  CHECK_THROWS_WITH_AS(mirrored.evaluate(two.distribute(strata::data::from_tensor_slices(x, y).batch(16))),
                       doctest::Contains("sparse_categorical_crossentropy: 1 of 8 labels of the batch are not class "
                                         "indices"),
                       std::exception);
  backend = saved;
}

}  // namespace stand_in_grid_test
