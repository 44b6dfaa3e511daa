// Conv2D, MaxPool2D and Dropout: hand-computed forwards, a direct-loop
// reference convolution, gradient checks, batch 0, shape errors, and the
// determinism of dropout masks.

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/nn/layers/conv2d.hpp>
#include <strata/nn/layers/dropout.hpp>
#include <strata/nn/layers/max_pool2d.hpp>

#include "nn/layers/gradcheck.hpp"

namespace conv_layers_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using strata::Shape;
using strata::Tensor;

namespace {

//! Owns the parameter storage of a built layer and binds it.
struct Params {
  std::vector<std::vector<float>> values, grads;
  explicit Params(nn::Layer& layer) {
    std::vector<nn::ParamRef> refs;
    const auto specs = layer.params();
    values.resize(specs.size());
    grads.resize(specs.size());
    for (std::size_t p = 0; p < specs.size(); ++p) {
      values[p].assign(specs[p].shape.elements(), 0.f);
      grads[p].assign(specs[p].shape.elements(), 0.f);
      refs.push_back({values[p], grads[p]});
    }
    layer.bind(refs);
  }
};

Tensor<float> random_tensor(Shape shape, std::uint64_t key) {
  Tensor<float> t(std::move(shape));
  nn::Rng rng{key};
  for (auto& e : t) e = 2.f * rng.uniform() - 1.f;
  return t;
}

Tensor<float> run(nn::Layer& layer, const Tensor<float>& x, const nn::RunInfo& info = {}) {
  Tensor<float> y;
  layer.forward(x, y, info);
  return y;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

//! The Keras definition of a 2-D convolution, written out as plain loops with
//! its own padding arithmetic, to hold Conv2D's im2col + GEMM against.
Tensor<float> direct_conv(const Tensor<float>& x, const std::vector<float>& kernel, const std::vector<float>& bias,
                          std::size_t kh, std::size_t kw, std::size_t filters, std::size_t sh, std::size_t sw,
                          bool same) {
  const long b_n = static_cast<long>(x.shape()[0]), h = static_cast<long>(x.shape()[1]),
             w = static_cast<long>(x.shape()[2]), c_n = static_cast<long>(x.shape()[3]);
  const long KH = static_cast<long>(kh), KW = static_cast<long>(kw), F = static_cast<long>(filters),
             SH = static_cast<long>(sh), SW = static_cast<long>(sw);
  const long oh_n = same ? (h + SH - 1) / SH : (h - KH) / SH + 1;
  const long ow_n = same ? (w + SW - 1) / SW : (w - KW) / SW + 1;
  const long pt = same ? std::max((oh_n - 1) * SH + KH - h, 0L) / 2 : 0;
  const long pl = same ? std::max((ow_n - 1) * SW + KW - w, 0L) / 2 : 0;
  Tensor<float> y(Shape{x.shape()[0], static_cast<std::size_t>(oh_n), static_cast<std::size_t>(ow_n), filters});
  for (long b = 0; b < b_n; ++b)
    for (long oh = 0; oh < oh_n; ++oh)
      for (long ow = 0; ow < ow_n; ++ow)
        for (long f = 0; f < F; ++f) {
          double acc = bias[static_cast<std::size_t>(f)];
          for (long i = 0; i < KH; ++i)
            for (long j = 0; j < KW; ++j)
              for (long c = 0; c < c_n; ++c) {
                const long ih = oh * SH + i - pt, iw = ow * SW + j - pl;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                acc += static_cast<double>(x[static_cast<std::size_t>(((b * h + ih) * w + iw) * c_n + c)]) *
                       kernel[static_cast<std::size_t>(((i * KW + j) * c_n + c) * F + f)];
              }
          y[static_cast<std::size_t>(((b * oh_n + oh) * ow_n + ow) * F + f)] = static_cast<float>(acc);
        }
  return y;
}

void check_values(const Tensor<float>& t, const std::vector<float>& want) {
  REQUIRE(t.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(t[i] == doctest::Approx(want[i]).epsilon(1e-6));
  }
}

}  // namespace

TEST_SUITE("Conv2D") {
  TEST_CASE("a 1-channel 3x3 image with a known kernel") {
    const Tensor<float> x{{1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};

    SUBCASE("3x3 Laplacian, valid and same") {
      const std::vector<float> laplacian{0, 1, 0, 1, -4, 1, 0, 1, 0};
      nn::Conv2D valid(1, 3);
      CHECK(valid.build({3, 3, 1}) == Shape{1, 1, 1});
      Params pv(valid);
      pv.values[0] = laplacian;
      pv.values[1] = {0.5f};
      check_values(run(valid, x), {0.5f});

      nn::Conv2D same(1, 3, {.padding = nn::Padding::Same});
      CHECK(same.build({3, 3, 1}) == Shape{3, 3, 1});
      Params ps(same);
      ps.values[0] = laplacian;
      ps.values[1] = {0.5f};
      check_values(run(same, x), {2.5f, 1.5f, -3.5f, -2.5f, 0.5f, -6.5f, -15.5f, -10.5f, -21.5f});
    }

    SUBCASE("an asymmetric 2x2 kernel is correlated, not flipped") {
      nn::Conv2D conv(1, 2);
      CHECK(conv.build({3, 3, 1}) == Shape{2, 2, 1});
      Params p(conv);
      p.values[0] = {1, 2, 3, 4};
      check_values(run(conv, x), {37, 47, 67, 77});
    }

    SUBCASE("same padding with stride 2 puts the odd padding at the bottom/right") {
      nn::Conv2D conv(1, 2, {.strides = {2, 2}, .padding = nn::Padding::Same});
      CHECK(conv.build({3, 3, 1}) == Shape{2, 2, 1});
      Params p(conv);
      p.values[0] = {1, 2, 3, 4};
      check_values(run(conv, x), {37, 21, 23, 9});
    }
  }

  TEST_CASE("the kernel is laid out [kh, kw, C, filters] and samples follow each other") {
    nn::Conv2D conv(2, 1);
    conv.build({1, 1, 2});
    Params p(conv);
    p.values[0] = {1, 10, 100, 1000};  // [c][f]
    p.values[1] = {0.25f, -0.25f};
    const Tensor<float> x{{2, 1, 1, 2}, {1, 2, 3, 4}};
    check_values(run(conv, x), {201.25f, 2009.75f, 403.25f, 4029.75f});
  }

  TEST_CASE("matches a direct convolution") {
    struct Case {
      Shape in;
      std::size_t filters, kh, kw, sh, sw;
      bool same;
    };
    const std::vector<Case> cases{
        {{7, 7, 3}, 4, 3, 3, 1, 1, false}, {{7, 7, 3}, 4, 3, 3, 1, 1, true},  {{8, 7, 2}, 3, 3, 3, 2, 2, true},
        {{8, 7, 2}, 3, 3, 3, 2, 2, false}, {{6, 9, 3}, 5, 2, 3, 2, 1, true},  {{6, 9, 1}, 2, 3, 1, 1, 3, false},
        {{5, 5, 2}, 2, 4, 4, 3, 3, true},  {{4, 4, 2}, 3, 1, 1, 2, 2, false}, {{3, 5, 4}, 2, 3, 5, 1, 1, true},
    };
    std::uint64_t key = 10;
    for (const auto& c : cases) {
      INFO("input " << c.in.str() << " filters " << c.filters << " kernel " << c.kh << "x" << c.kw << " strides "
                    << c.sh << "x" << c.sw << (c.same ? " same" : " valid"));
      nn::Conv2D conv(c.filters, {c.kh, c.kw},
                      {.strides = {c.sh, c.sw}, .padding = c.same ? nn::Padding::Same : nn::Padding::Valid});
      conv.build(c.in);
      Params p(conv);
      for (std::size_t q = 0; q < 2; ++q) {
        const auto r = random_tensor(Shape{p.values[q].size()}, ++key);
        std::copy(r.begin(), r.end(), p.values[q].begin());
      }
      const auto x = random_tensor(Shape{3, c.in[0], c.in[1], c.in[2]}, ++key);
      const auto want = direct_conv(x, p.values[0], p.values[1], c.kh, c.kw, c.filters, c.sh, c.sw, c.same);
      const auto got = run(conv, x);
      REQUIRE(got.shape() == want.shape());
      CHECK(strata::allclose(got, want, {.rtol = 1e-5, .atol = 1e-5}));
    }
  }

  TEST_CASE("output shapes follow Keras") {
    CHECK(nn::Conv2D(32, 3).build({28, 28, 1}) == Shape{26, 26, 32});
    CHECK(nn::Conv2D(64, 3).build({13, 13, 32}) == Shape{11, 11, 64});
    CHECK(nn::Conv2D(8, 3, {.padding = nn::Padding::Same}).build({28, 28, 1}) == Shape{28, 28, 8});
    CHECK(nn::Conv2D(8, 3, {.strides = {2, 2}, .padding = nn::Padding::Same}).build({28, 28, 1}) ==
          Shape{14, 14, 8});
    CHECK(nn::Conv2D(8, 3, {.strides = {2, 2}, .padding = nn::Padding::Same}).build({5, 5, 1}) == Shape{3, 3, 8});
    CHECK(nn::Conv2D(8, 3, {.strides = {2, 2}}).build({5, 5, 1}) == Shape{2, 2, 8});
    CHECK(nn::Conv2D(8, {3, 1}, {.strides = {2, 3}, .padding = nn::Padding::Same}).build({7, 7, 2}) ==
          Shape{4, 3, 8});
    CHECK(nn::Conv2D(8, 5, {.padding = nn::Padding::Same}).build({2, 2, 1}) == Shape{2, 2, 8});
  }

  TEST_CASE("declares its kernel and bias") {
    nn::Conv2D conv(64, {3, 2}, {.l2 = 1e-4f});
    conv.build({13, 13, 32});
    const auto specs = conv.params();
    REQUIRE(specs.size() == 2);
    CHECK(specs[0].name == "kernel");
    CHECK(specs[0].shape == Shape{3, 2, 32, 64});
    CHECK(specs[0].init == nn::Init::GlorotUniform);
    CHECK(specs[0].fan_in == 3 * 2 * 32);
    CHECK(specs[0].fan_out == 3 * 2 * 64);
    CHECK(specs[0].l2 == 1e-4f);
    CHECK(specs[1].name == "bias");
    CHECK(specs[1].shape == Shape{64});
    CHECK(specs[1].init == nn::Init::Zeros);
    CHECK(specs[1].l2 == 0.f);
    CHECK(conv.kind() == "Conv2D");
  }

  TEST_CASE("gradients match central differences") {
    struct Case {
      const char* name;
      Shape in;
      std::size_t filters, kh, kw, sh, sw, batch;
      nn::Padding padding;
    };
    const std::vector<Case> cases{
        {"valid, stride 1", {5, 5, 2}, 3, 3, 3, 1, 1, 3, nn::Padding::Valid},
        {"same, stride 1", {5, 5, 2}, 3, 3, 3, 1, 1, 3, nn::Padding::Same},
        {"valid, stride 2", {7, 6, 3}, 4, 3, 3, 2, 2, 1, nn::Padding::Valid},
        {"same, stride 2", {6, 7, 3}, 4, 3, 3, 2, 2, 3, nn::Padding::Same},
        {"non-square kernel and strides", {6, 7, 3}, 2, 2, 3, 2, 1, 3, nn::Padding::Same},
        {"non-square kernel, valid", {5, 6, 2}, 2, 3, 2, 1, 2, 1, nn::Padding::Valid},
        {"one channel, one filter", {4, 4, 1}, 1, 3, 3, 1, 1, 1, nn::Padding::Same},
        {"kernel wider than stride gaps", {5, 5, 2}, 2, 2, 2, 3, 3, 3, nn::Padding::Same},
    };
    for (const auto& c : cases) {
      CAPTURE(c.name);
      nn::Conv2D conv(c.filters, {c.kh, c.kw}, {.strides = {c.sh, c.sw}, .padding = c.padding});
      const auto r = strata_test::gradcheck(conv, c.in, c.batch);
      CHECK_MESSAGE(r.ok, r.report);
      CHECK(r.checked > 0);
    }
  }

  TEST_CASE("batch 0") {
    nn::Conv2D conv(4, 3, {.padding = nn::Padding::Same});
    conv.build({6, 6, 2});
    Params p(conv);
    for (auto& g : p.grads) std::fill(g.begin(), g.end(), 7.f);
    const Tensor<float> x(Shape{0, 6, 6, 2});
    Tensor<float> y;
    conv.forward(x, y, {});
    CHECK(y.shape() == Shape{0, 6, 6, 4});
    Tensor<float> dx;
    conv.backward(x, y, Tensor<float>(Shape{0, 6, 6, 4}), &dx);
    CHECK(dx.shape() == Shape{0, 6, 6, 2});
    for (const auto& g : p.grads) CHECK(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.f; }));
    const auto r = strata_test::gradcheck(conv, {6, 6, 2}, 0);
    CHECK_MESSAGE(r.ok, r.report);
  }

  TEST_CASE("scratch buffers follow the batch size and the input") {
    nn::Conv2D conv(3, 3, {.strides = {2, 1}, .padding = nn::Padding::Same});
    conv.build({5, 6, 2});
    Params p(conv);
    for (std::size_t q = 0; q < 2; ++q) {
      const auto r = random_tensor(Shape{p.values[q].size()}, 70 + q);
      std::copy(r.begin(), r.end(), p.values[q].begin());
    }
    const auto big = random_tensor(Shape{4, 5, 6, 2}, 80), small = random_tensor(Shape{1, 5, 6, 2}, 81);
    const auto dy_big = random_tensor(Shape{4, 3, 6, 3}, 82);

    auto grads_of = [&](const Tensor<float>& x, const Tensor<float>& dy) {
      Tensor<float> y, dx;
      conv.forward(x, y, {});
      conv.backward(x, y, dy, &dx);
      return std::pair{dx, p.grads[0]};
    };
    const auto first = grads_of(big, dy_big);
    {  // a second backward of the same forward
      Tensor<float> y, dx;
      conv.forward(big, y, {});
      conv.backward(big, y, dy_big, &dx);
      conv.backward(big, y, dy_big, &dx);
      CHECK(dx == first.first);
      CHECK(p.grads[0] == first.second);
    }
    CHECK(run(conv, small).shape() == Shape{1, 3, 6, 3});
    const auto again = grads_of(big, dy_big);
    CHECK(again.first == first.first);
    CHECK(again.second == first.second);

    // backward of an x that is not the last forward's input rebuilds its columns
    const Tensor<float> other(Shape{4, 5, 6, 2}, 0.5f);
    Tensor<float> y_other, dx_ref;
    conv.forward(other, y_other, {});
    conv.backward(other, y_other, dy_big, &dx_ref);
    const auto kernel_grad_ref = p.grads[0];
    Tensor<float> y, dx;
    conv.forward(big, y, {});
    conv.backward(other, y_other, dy_big, &dx);
    CHECK(p.grads[0] == kernel_grad_ref);
    CHECK(dx == dx_ref);
    CHECK(!(kernel_grad_ref == first.second));
  }

  TEST_CASE("shape errors name the layer, what it expected and what arrived") {
    CHECK_THROWS_AS(nn::Conv2D(8, 3).build({28, 28}), strata::ShapeError);
    CHECK_THROWS_AS(nn::Conv2D(8, 3).build({2, 28, 28, 1}), strata::ShapeError);
    CHECK(contains(error_of([] { nn::Conv2D(8, 3).build({28, 28}); }), "[28, 28]"));
    CHECK(contains(error_of([] { nn::Conv2D(8, 3).build({28, 28}); }), "Conv2D"));

    CHECK_THROWS_AS(nn::Conv2D(8, 5).build({4, 4, 1}), strata::ShapeError);
    CHECK_THROWS_AS(nn::Conv2D(8, {2, 5}).build({6, 4, 1}), strata::ShapeError);
    CHECK(contains(error_of([] { nn::Conv2D(8, 5).build({4, 4, 1}); }), "5x5"));
    CHECK_NOTHROW(nn::Conv2D(8, 5, {.padding = nn::Padding::Same}).build({4, 4, 1}));

    CHECK_THROWS_AS(nn::Conv2D(0, 3).build({8, 8, 1}), strata::ShapeError);
    CHECK(contains(error_of([] { nn::Conv2D(0, 3).build({8, 8, 1}); }), "filters"));
    CHECK_THROWS_AS(nn::Conv2D(4, 3, {.strides = {0, 1}}).build({8, 8, 1}), strata::ShapeError);
    CHECK_THROWS_AS(nn::Conv2D(4, 3, {.strides = {1, 0}}).build({8, 8, 1}), strata::ShapeError);
    CHECK(contains(error_of([] { nn::Conv2D(4, 3, {.strides = {1, 0}}).build({8, 8, 1}); }), "strides"));
    CHECK_THROWS_AS(nn::Conv2D(4, {0, 3}).build({8, 8, 1}), strata::ShapeError);
    CHECK_THROWS_AS(nn::Conv2D(4, 3).build({8, 0, 1}), strata::ShapeError);
    CHECK_THROWS_AS(nn::Conv2D(4, 3, {.l2 = -1.f}).build({8, 8, 1}), strata::Error);

    nn::Conv2D conv(4, 3);
    CHECK_THROWS_AS(run(conv, Tensor<float>(Shape{1, 8, 8, 1})), strata::Error);  // before build
    conv.build({8, 8, 1});
    CHECK_THROWS_AS(run(conv, Tensor<float>(Shape{1, 8, 8, 1})), strata::Error);  // before bind
    Params p(conv);
    CHECK_THROWS_AS(run(conv, Tensor<float>(Shape{1, 8, 8, 3})), strata::ShapeError);
    const std::string wrong_input = error_of([&] { run(conv, Tensor<float>(Shape{2, 8, 8, 3})); });
    CHECK(contains(wrong_input, "[batch, 8, 8, 1]"));
    CHECK(contains(wrong_input, "[2, 8, 8, 3]"));
    CHECK_THROWS_AS(run(conv, Tensor<float>(Shape{8, 8, 1})), strata::ShapeError);

    const Tensor<float> x(Shape{2, 8, 8, 1});
    const auto y = run(conv, x);
    Tensor<float> dx;
    CHECK_THROWS_AS(conv.backward(x, y, Tensor<float>(Shape{2, 6, 6, 3}), &dx), strata::ShapeError);
    CHECK_THROWS_AS(conv.backward(x, y, Tensor<float>(Shape{1, 6, 6, 4}), &dx), strata::ShapeError);
    CHECK(contains(error_of([&] { conv.backward(x, y, Tensor<float>(Shape{1, 6, 6, 4}), &dx); }), "[2, 6, 6, 4]"));

    std::vector<float> small(3), grad(3);
    const std::vector<nn::ParamRef> wrong{{small, grad}, {small, grad}};
    CHECK_THROWS_AS(conv.bind(wrong), strata::ShapeError);
    CHECK_THROWS_AS(conv.bind(std::span<const nn::ParamRef>(wrong).first(1)), strata::Error);
  }
}

TEST_SUITE("MaxPool2D") {
  TEST_CASE("a known 4x4 image, channel by channel") {
    const std::vector<float> image{1, 5, 2, 0, 3, 4, 8, 6, 7, 0, 1, 2, 9, 2, 3, 4};
    Tensor<float> x(Shape{1, 4, 4, 2});
    for (std::size_t i = 0; i < 16; ++i) x[2 * i] = image[i], x[2 * i + 1] = -image[i];
    nn::MaxPool2D pool(2);
    CHECK(pool.build({4, 4, 2}) == Shape{2, 2, 2});
    CHECK(pool.params().empty());
    CHECK(pool.kind() == "MaxPool2D");
    Tensor<float> y;
    pool.forward(x, y, {});
    check_values(y, {5, -1, 8, 0, 9, 0, 4, -1});

    const Tensor<float> dy{{1, 2, 2, 2}, {1, 10, 2, 20, 3, 30, 4, 40}};
    Tensor<float> dx;
    pool.backward(x, y, dy, &dx);
    REQUIRE(dx.shape() == Shape{1, 4, 4, 2});
    Tensor<float> want(Shape{1, 4, 4, 2});
    want(0, 0, 1, 0) = 1, want(0, 1, 2, 0) = 2, want(0, 3, 0, 0) = 3, want(0, 3, 3, 0) = 4;
    want(0, 0, 0, 1) = 10, want(0, 0, 3, 1) = 20, want(0, 2, 1, 1) = 30, want(0, 2, 2, 1) = 40;
    CHECK(dx == want);
  }

  TEST_CASE("same padding never lets the padding win") {
    Tensor<float> x(Shape{1, 3, 3, 1});
    for (std::size_t i = 0; i < 9; ++i) x[i] = -static_cast<float>(i + 1);
    nn::MaxPool2D pool(2, {.padding = nn::Padding::Same});
    CHECK(pool.build({3, 3, 1}) == Shape{2, 2, 1});
    check_values(run(pool, x), {-1, -3, -7, -9});
  }

  TEST_CASE("ties go to the first maximum, overlapping windows accumulate") {
    nn::MaxPool2D pool(2, {.strides = {1, 1}});
    CHECK(pool.build({3, 3, 1}) == Shape{2, 2, 1});
    Tensor<float> x(Shape{1, 3, 3, 1}, 1.f);
    Tensor<float> y, dx;
    pool.forward(x, y, {});
    pool.backward(x, y, Tensor<float>{{1, 2, 2, 1}, {1, 2, 3, 4}}, &dx);
    // every window is a tie: each routes to its top-left element
    check_values(dx, {1, 2, 0, 3, 4, 0, 0, 0, 0});

    x(0, 1, 1, 0) = 9.f;  // the centre is in all four windows
    pool.forward(x, y, {});
    check_values(y, {9, 9, 9, 9});
    pool.backward(x, y, Tensor<float>{{1, 2, 2, 1}, {1, 2, 3, 4}}, &dx);
    check_values(dx, {0, 0, 0, 0, 10, 0, 0, 0, 0});
  }

  TEST_CASE("a NaN in a window shows in the output") {
    nn::MaxPool2D pool(2);
    pool.build({2, 2, 1});
    CHECK(std::isnan(run(pool, Tensor<float>{{1, 2, 2, 1}, {1, std::numeric_limits<float>::quiet_NaN(), 3, 2}})[0]));
  }

  TEST_CASE("a NaN wins wherever it lies in its window; the other windows stay as they were") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    nn::MaxPool2D pool(2);
    pool.build({2, 4, 1});
    // window 0: NaN first, then larger values (a NaN seed must not be replaced); window 1: NaN last
    const auto y = run(pool, Tensor<float>{{1, 2, 4, 1}, {nan, 7, 1, 2, 8, 9, 3, nan}});
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(y[1]));
    const auto z = run(pool, Tensor<float>{{1, 2, 4, 1}, {nan, 7, 1, 2, 8, 9, 3, 4}});
    CHECK(std::isnan(z[0]));
    CHECK(z[1] == 4.f);
  }

  TEST_CASE("output shapes follow Keras") {
    CHECK(nn::MaxPool2D(2).build({26, 26, 32}) == Shape{13, 13, 32});
    CHECK(nn::MaxPool2D(2).build({11, 11, 64}) == Shape{5, 5, 64});
    CHECK(nn::MaxPool2D(2, {.padding = nn::Padding::Same}).build({5, 5, 1}) == Shape{3, 3, 1});
    CHECK(nn::MaxPool2D(2, {.padding = nn::Padding::Same}).build({28, 28, 3}) == Shape{14, 14, 3});
    CHECK(nn::MaxPool2D(3, {.strides = {2, 2}}).build({5, 5, 1}) == Shape{2, 2, 1});
    CHECK(nn::MaxPool2D(3, {.strides = {2, 2}, .padding = nn::Padding::Same}).build({5, 5, 1}) == Shape{3, 3, 1});
    CHECK(nn::MaxPool2D({2, 3}, {.strides = {1, 2}}).build({5, 5, 4}) == Shape{4, 2, 4});
  }

  TEST_CASE("gradients match central differences") {
    struct Case {
      const char* name;
      Shape in;
      std::array<std::size_t, 2> pool;
      std::array<std::size_t, 2> strides;
      nn::Padding padding;
      std::size_t batch;
    };
    const std::vector<Case> cases{
        {"2x2, valid", {4, 4, 2}, {2, 2}, {}, nn::Padding::Valid, 3},
        {"2x2, same, odd input", {5, 5, 2}, {2, 2}, {}, nn::Padding::Same, 3},
        {"3x3 stride 2, valid", {7, 5, 3}, {3, 3}, {2, 2}, nn::Padding::Valid, 1},
        {"3x3 stride 2, same", {6, 5, 3}, {3, 3}, {2, 2}, nn::Padding::Same, 3},
        {"2x2 stride 1 (overlapping)", {4, 5, 2}, {2, 2}, {1, 1}, nn::Padding::Valid, 3},
        {"2x3 strides 1x2, same", {5, 6, 2}, {2, 3}, {1, 2}, nn::Padding::Same, 1},
        {"2x2 stride 3 (gaps)", {7, 7, 1}, {2, 2}, {3, 3}, nn::Padding::Same, 3},
    };
    for (const auto& c : cases) {
      CAPTURE(c.name);
      nn::MaxPool2D pool(c.pool, {.strides = c.strides, .padding = c.padding});
      const auto r = strata_test::gradcheck(pool, c.in, c.batch, {.distinct_inputs = true});
      CHECK_MESSAGE(r.ok, r.report);
      CHECK(r.checked > 0);
    }
  }

  TEST_CASE("batch 0") {
    nn::MaxPool2D pool(2, {.padding = nn::Padding::Same});
    pool.build({5, 5, 3});
    const Tensor<float> x(Shape{0, 5, 5, 3});
    Tensor<float> y, dx;
    pool.forward(x, y, {});
    CHECK(y.shape() == Shape{0, 3, 3, 3});
    pool.backward(x, y, Tensor<float>(Shape{0, 3, 3, 3}), &dx);
    CHECK(dx.shape() == Shape{0, 5, 5, 3});
  }

  TEST_CASE("shape errors") {
    CHECK_THROWS_AS(nn::MaxPool2D(2).build({28, 28}), strata::ShapeError);
    CHECK(contains(error_of([] { nn::MaxPool2D(2).build({28, 28}); }), "MaxPool2D"));
    CHECK_THROWS_AS(nn::MaxPool2D(3).build({2, 8, 1}), strata::ShapeError);
    CHECK(contains(error_of([] { nn::MaxPool2D(3).build({2, 8, 1}); }), "3x3"));
    CHECK_NOTHROW(nn::MaxPool2D(3, {.padding = nn::Padding::Same}).build({2, 8, 1}));
    CHECK_THROWS_AS(nn::MaxPool2D(0).build({8, 8, 1}), strata::ShapeError);
    CHECK_THROWS_AS(nn::MaxPool2D(2, {.strides = {2, 0}}).build({8, 8, 1}), strata::ShapeError);
    CHECK(contains(error_of([] { nn::MaxPool2D(2, {.strides = {2, 0}}).build({8, 8, 1}); }), "strides"));

    nn::MaxPool2D pool(2);
    pool.build({4, 4, 1});
    CHECK_THROWS_AS(run(pool, Tensor<float>(Shape{1, 4, 4, 2})), strata::ShapeError);
    const Tensor<float> x(Shape{2, 4, 4, 1});
    Tensor<float> dx;
    // no forward yet: nothing to route the gradient through
    CHECK_THROWS_AS(pool.backward(x, Tensor<float>(Shape{2, 2, 2, 1}), Tensor<float>(Shape{2, 2, 2, 1}), &dx),
                    strata::Error);
    const auto y = run(pool, x);
    CHECK_THROWS_AS(pool.backward(x, y, Tensor<float>(Shape{2, 2, 2, 2}), &dx), strata::ShapeError);
  }
}

TEST_SUITE("Dropout") {
  TEST_CASE("the rate must lie in [0, 1)") {
    CHECK_THROWS_AS(nn::Dropout(-0.1f), strata::Error);
    CHECK_THROWS_AS(nn::Dropout(1.f), strata::Error);
    CHECK_THROWS_AS(nn::Dropout(1.5f), strata::Error);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(nn::Dropout{nan}, strata::Error);
    CHECK(contains(error_of([] { nn::Dropout(1.f); }), "[0, 1)"));
    CHECK_NOTHROW(nn::Dropout(0.f));
    CHECK_NOTHROW(nn::Dropout(0.99f));
    CHECK(nn::Dropout(0.25f).rate() == 0.25f);
    CHECK(nn::Dropout(0.25f).kind() == "Dropout");
  }

  TEST_CASE("identity at inference and at rate 0") {
    const auto x = random_tensor(Shape{5, 3, 4}, 1);
    const auto dy = random_tensor(Shape{5, 3, 4}, 2);
    nn::Dropout inference(0.5f);
    CHECK(inference.build({3, 4}) == Shape{3, 4});
    CHECK(inference.params().empty());
    nn::Dropout zero(0.f);
    zero.build({3, 4});
    const std::vector<std::pair<nn::Dropout*, nn::RunInfo>> cases{
        {&inference, {.training = false, .seed = 3, .step = 9}},
        {&zero, {.training = true, .seed = 3, .step = 9}},
    };
    for (const auto& [layer, info] : cases) {
      Tensor<float> y, dx;
      layer->forward(x, y, info);
      CHECK(y == x);
      layer->backward(x, y, dy, &dx);
      CHECK(dx == dy);
    }
  }

  TEST_CASE("training keeps about 1 - rate of the units, scaled by 1 / (1 - rate)") {
    for (const float rate : {0.1f, 0.3f, 0.5f, 0.8f}) {
      CAPTURE(rate);
      nn::Dropout drop(rate);
      drop.build({100});
      const Tensor<float> x(Shape{1000, 100}, 1.f);
      Tensor<float> y;
      drop.forward(x, y, {.training = true, .replica = 0, .seed = 11, .step = 3});
      const float scale = 1.f / (1.f - rate);
      std::size_t kept = 0, other = 0;
      double sum = 0;
      for (const float v : y) {
        if (v == scale) ++kept;
        else if (v != 0.f) ++other;
        sum += v;
      }
      CHECK(other == 0);
      // 1e5 Bernoulli draws: the standard deviation of the fraction is below 0.0016
      CHECK(std::abs(static_cast<double>(kept) / 1e5 - (1.0 - rate)) < 0.01);
      CHECK(std::abs(sum / 1e5 - 1.0) < 0.05);
    }
  }

  TEST_CASE("backward routes dy through the same mask") {
    nn::Dropout drop(0.4f);
    drop.build({6, 7});
    const auto x = random_tensor(Shape{3, 6, 7}, 5);
    const auto dy = random_tensor(Shape{3, 6, 7}, 6);
    Tensor<float> y, dx;
    drop.forward(x, y, {.training = true, .seed = 1});
    drop.backward(x, y, dy, &dx);
    const float scale = 1.f / (1.f - 0.4f);
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (y[i] == 0.f) {
        ++dropped;
        CHECK(dx[i] == 0.f);
      } else {
        CHECK(y[i] == x[i] * scale);
        CHECK(dx[i] == dy[i] * scale);
      }
    }
    CHECK(dropped > 0);
    CHECK(dropped < x.size());
  }

  TEST_CASE("the mask is a function of (seed, replica, step, salt)") {
    const Tensor<float> x(Shape{50, 40}, 1.f);
    auto mask = [&](nn::Dropout& layer, nn::RunInfo info) { return run(layer, x, info); };
    auto fraction_differing = [](const Tensor<float>& a, const Tensor<float>& b) {
      std::size_t n = 0;
      for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
      return static_cast<double>(n) / static_cast<double>(a.size());
    };
    nn::Dropout drop(0.5f, 2);
    drop.build({40});
    CHECK(drop.salt() == 2);
    const nn::RunInfo base{.training = true, .replica = 1, .seed = 42, .step = 7};
    const auto reference = mask(drop, base);

    CHECK(mask(drop, base) == reference);
    const auto copy = drop.clone();
    CHECK(run(*copy, x, base) == reference);
    nn::Dropout fresh(0.5f, 2);
    fresh.build({40});
    CHECK(mask(fresh, base) == reference);

    // independent masks differ in about half of the units (2 * 0.5 * 0.5)
    auto with = [&](auto change) {
      nn::RunInfo info = base;
      change(info);
      return info;
    };
    CHECK(fraction_differing(mask(drop, with([](auto& i) { i.replica = 0; })), reference) > 0.4);
    CHECK(fraction_differing(mask(drop, with([](auto& i) { i.step = 8; })), reference) > 0.4);
    CHECK(fraction_differing(mask(drop, with([](auto& i) { i.seed = 43; })), reference) > 0.4);
    nn::Dropout other_salt(0.5f);
    other_salt.build({40});
    other_salt.set_salt(3);
    CHECK(other_salt.salt() == 3);
    CHECK(fraction_differing(mask(other_salt, base), reference) > 0.4);
    other_salt.set_salt(2);
    CHECK(mask(other_salt, base) == reference);
  }

  TEST_CASE("replicas on threads draw the masks they draw alone") {
    nn::Dropout proto(0.3f, 5);
    proto.build({64});
    const auto x = random_tensor(Shape{32, 64}, 9);
    constexpr int replicas = 2, steps = 20;
    std::vector<std::vector<Tensor<float>>> alone(replicas), threaded(replicas);
    for (int r = 0; r < replicas; ++r) {
      const auto layer = proto.clone();
      for (int s = 0; s < steps; ++s)
        alone[r].push_back(run(*layer, x, {.training = true, .replica = r, .seed = 8, .step = std::uint64_t(s)}));
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < replicas; ++r)
      threads.emplace_back([&, r] {
        const auto layer = proto.clone();
        for (int s = steps; s-- > 0;)  // another order than above, on purpose
          threaded[r].insert(threaded[r].begin(),
                             run(*layer, x, {.training = true, .replica = r, .seed = 8, .step = std::uint64_t(s)}));
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < replicas; ++r)
      for (int s = 0; s < steps; ++s) CHECK(threaded[r][s] == alone[r][s]);
    CHECK(!(alone[0][0] == alone[1][0]));
  }

  TEST_CASE("gradients match central differences") {
    for (const float rate : {0.f, 0.2f, 0.5f}) {
      CAPTURE(rate);
      nn::Dropout drop(rate);
      const auto train = strata_test::gradcheck(drop, {4, 3, 2}, 3, {.info = {.training = true, .seed = 17}});
      CHECK_MESSAGE(train.ok, train.report);
      const auto infer = strata_test::gradcheck(drop, {7}, 2);
      CHECK_MESSAGE(infer.ok, infer.report);
    }
  }

  TEST_CASE("batch 0 and shape errors") {
    nn::Dropout drop(0.5f);
    drop.build({3, 2});
    const Tensor<float> x(Shape{0, 3, 2});
    Tensor<float> y, dx;
    drop.forward(x, y, {.training = true});
    CHECK(y.shape() == Shape{0, 3, 2});
    drop.backward(x, y, Tensor<float>(Shape{0, 3, 2}), &dx);
    CHECK(dx.shape() == Shape{0, 3, 2});

    CHECK_THROWS_AS(run(drop, Tensor<float>(Shape{2, 2, 3})), strata::ShapeError);
    CHECK(contains(error_of([&] { run(drop, Tensor<float>(Shape{2, 2, 3})); }), "[batch, 3, 2]"));
    const Tensor<float> x2(Shape{2, 3, 2});
    const auto y2 = run(drop, x2, {.training = true});
    CHECK_THROWS_AS(drop.backward(x2, y2, Tensor<float>(Shape{2, 3, 3}), &dx), strata::ShapeError);
    CHECK_THROWS_AS(nn::Dropout(0.5f).forward(x2, y, {}), strata::Error);  // before build
  }
}

namespace {

//! y = w * x + b elementwise over [n], with a bug on request: the checker's
//! own test, so that a wrong backward is shown to fail it.
class Affine : public nn::detail::LayerBase<Affine> {
 public:
  enum class Bug { None, KernelTwice, AccumulatesGrad, DxSign, BiasOnlyWithDx };
  explicit Affine(Bug bug) : bug_(bug) {}
  [[nodiscard]] std::string kind() const override { return "Affine"; }
  Shape build(const Shape& input) override {
    n_ = input.elements();
    return input;
  }
  [[nodiscard]] std::vector<nn::ParamSpec> params() const override {
    return {{"w", Shape{n_}, nn::Init::GlorotUniform, n_, n_, 0.f}, {"b", Shape{n_}}};
  }
  void bind(std::span<const nn::ParamRef> p) override { w_ = p[0], b_ = p[1]; }
  using nn::Layer::backward;
  using nn::Layer::forward;
  // a host-only layer: its buffers' elements through host_span() (which refuses a GPU's)
  void forward(nn::Compute& c, const nn::Act& xb, nn::Act& yb, const nn::RunInfo&) override {
    nn::detail::resize(c, yb, xb.shape()[0], Shape{n_});
    const auto x = xb.host_span();
    const auto y = yb.host_span();
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = w_.value[i % n_] * x[i] + b_.value[i % n_];
  }
  void backward(nn::Compute& c, const nn::Act& xb, const nn::Act&, const nn::Act& dyb, nn::Act* dxb) override {
    const auto x = xb.host_span();
    const auto dy = dyb.host_span();
    if (bug_ != Bug::AccumulatesGrad) {
      std::fill(w_.grad.begin(), w_.grad.end(), 0.f);
      std::fill(b_.grad.begin(), b_.grad.end(), 0.f);
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      w_.grad[i % n_] += (bug_ == Bug::KernelTwice ? 2.f : 1.f) * dy[i] * x[i];
      if (bug_ != Bug::BiasOnlyWithDx || dxb) b_.grad[i % n_] += dy[i];
    }
    if (!dxb) return;
    nn::detail::resize(c, *dxb, xb.shape()[0], Shape{n_});
    const auto dx = dxb->host_span();
    for (std::size_t i = 0; i < x.size(); ++i) dx[i] = (bug_ == Bug::DxSign ? -1.f : 1.f) * dy[i] * w_.value[i % n_];
  }

 private:
  Bug bug_;
  std::size_t n_ = 0;
  nn::ParamRef w_{}, b_{};
};

}  // namespace

TEST_CASE("gradcheck fails a wrong backward and says where") {
  using Bug = Affine::Bug;
  Affine good(Bug::None);
  const auto ok = strata_test::gradcheck(good, {6}, 3);
  CHECK_MESSAGE(ok.ok, ok.report);
  CHECK(ok.checked == 3 * 6 + 6 + 6);
  CHECK(contains(ok.report, "dL/dw"));

  const std::vector<std::pair<Bug, std::string>> bugs{
      {Bug::KernelTwice, "FAIL Affine: dL/dw"},
      {Bug::AccumulatesGrad, "FAIL Affine: dL/d"},
      {Bug::DxSign, "FAIL Affine: dL/dx"},
      {Bug::BiasOnlyWithDx, "a second one without"},
  };
  for (const auto& bug : bugs) {
    const std::string& says = bug.second;
    CAPTURE(says);
    Affine bad(bug.first);
    const auto r = strata_test::gradcheck(bad, {6}, 3);
    CHECK_FALSE(r.ok);
    CHECK_FALSE(static_cast<bool>(r));
    CHECK_MESSAGE(contains(r.report, says), r.report);
  }

  // a sampled check still looks at max_checks elements of each tensor
  const auto sampled = strata_test::gradcheck(good, {6}, 3, {.max_checks = 4});
  CHECK(sampled.ok);
  CHECK(sampled.checked == 3 * 4);
}

}  // namespace conv_layers_test
