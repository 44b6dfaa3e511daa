// Dense, the activation layers, Flatten and Reshape: numeric-vs-analytic
// gradient checks (tests/nn/layers/gradcheck.hpp), known values, shape errors, and
// empty batches.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <strata/kernels/bodies/windows.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/nn.hpp>

#include "nn/layers/gradcheck.hpp"

namespace layers_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using strata::Shape;
using strata::Tensor;

TEST_CASE("Dense: gradients for every activation, with and without bias, batch 1 and 5") {
  for (auto act : {nn::Activation::Linear, nn::Activation::ReLU, nn::Activation::Sigmoid, nn::Activation::Tanh,
                   nn::Activation::Softmax})
    for (bool bias : {true, false})
      for (std::size_t batch : {1u, 5u}) {
        CAPTURE(static_cast<int>(act));
        CAPTURE(bias);
        CAPTURE(batch);
        nn::Dense d{4, {.activation = act, .use_bias = bias}};
        const auto r = strata_test::gradcheck(d, {7}, batch, {.distinct_inputs = act == nn::Activation::ReLU});
        CHECK_MESSAGE(r.ok, r.report);
      }
}

TEST_CASE("activation layers and Flatten/Reshape: gradients on multi-axis samples") {
  nn::ReLU relu;
  nn::Sigmoid sigmoid;
  nn::Tanh tanh_layer;
  nn::Softmax softmax;
  nn::Flatten flatten;
  nn::Reshape reshape{{6, 2}};
  for (nn::Layer* l : std::initializer_list<nn::Layer*>{&relu, &sigmoid, &tanh_layer, &softmax, &flatten, &reshape}) {
    CAPTURE(l->kind());
    const auto r = strata_test::gradcheck(*l, {3, 4}, 3, {.distinct_inputs = true});
    CHECK_MESSAGE(r.ok, r.report);
  }
}

TEST_CASE("Dense computes x . kernel + bias with a [in, units] kernel") {
  nn::Dense d{2, 3};
  CHECK(d.build({2}) == Shape{3});
  const auto p = d.params();
  REQUIRE(p.size() == 2);
  CHECK(p[0].shape == Shape{2, 3});
  CHECK(p[0].init == nn::Init::GlorotUniform);
  CHECK(p[1].shape == Shape{3});
  std::vector<float> k{1, 2, 3, 4, 5, 6}, b{0.5f, 0, -1}, gk(6), gb(3);
  const nn::ParamRef refs[] = {{k, gk}, {b, gb}};
  d.bind(refs);
  Tensor<float> x{{2, 2}, {1, 1, 0, 2}}, y;
  d.forward(x, y, {});
  CHECK(y == Tensor<float>{{2, 3}, {5.5f, 7, 8, 8.5f, 10, 11}});
  // an empty batch: empty output, zero gradients
  Tensor<float> e{{0, 2}}, ey, dy{{0, 3}}, dx;
  d.forward(e, ey, {});
  CHECK(ey.shape() == Shape{0, 3});
  gk.assign(6, 9.f);
  d.backward(e, ey, dy, &dx);
  CHECK(dx.shape() == Shape{0, 2});
  for (float g : gk) CHECK(g == 0.f);
}

TEST_CASE("softmax rows sum to one and survive huge inputs; ReLU/Sigmoid/Tanh values") {
  nn::Softmax s;
  s.build({3});
  Tensor<float> x{{2, 3}, {1000.f, 1000.f, -1000.f, 1.f, 2.f, 3.f}}, y;
  s.forward(x, y, {});
  CHECK(y[0] == doctest::Approx(0.5f));
  CHECK(y[2] == 0.f);
  CHECK(y[3] + y[4] + y[5] == doctest::Approx(1.f));
  nn::ReLU r;
  r.build({2});
  r.forward(Tensor<float>{{1, 2}, {-1.f, 2.f}}, y, {});
  CHECK(y == Tensor<float>{{1, 2}, {0.f, 2.f}});
  nn::Sigmoid sg;
  sg.build({1});
  sg.forward(Tensor<float>{{1, 1}, {0.f}}, y, {});
  CHECK(y[0] == 0.5f);
  nn::Tanh th;
  th.build({1});
  th.forward(Tensor<float>{{1, 1}, {1.f}}, y, {});
  CHECK(y[0] == doctest::Approx(std::tanh(1.f)));
}

TEST_CASE("shape errors name the layer and what it expected") {
  CHECK(nn::Dense{4}.build({2, 3}) == strata::Shape{2, 4});  // on the last axis, as Keras
  CHECK_THROWS_WITH_AS(nn::Dense{4}.build(strata::Shape{}), doctest::Contains("got a scalar per sample"),
                       strata::ShapeError);
  CHECK_THROWS_WITH_AS(nn::Dense(3, 4).build({5}), doctest::Contains("declared with input size 3"), strata::ShapeError);
  CHECK_THROWS_AS(nn::Dense{0}, strata::Error);
  CHECK_THROWS_WITH_AS(nn::Reshape({5}).build({2, 3}), doctest::Contains("cannot reshape"), strata::ShapeError);
  nn::Dense d{4};
  d.build({3});
  std::vector<float> k(12), b(4), gk(12), gb(4);
  const nn::ParamRef refs[] = {{k, gk}, {b, gb}};
  d.bind(refs);
  Tensor<float> y;
  CHECK_THROWS_WITH_AS(d.forward(Tensor<float>{{2, 5}}, y, {}), doctest::Contains("expected input [batch, 3] but got [2, 5]"),
                       strata::ShapeError);
  // a Sequential names the failing layer
  nn::Sequential m{nn::Input{{4, 4}}, nn::Flatten{}, nn::Dense{8}, nn::Reshape{{3, 3}}};
  CHECK_THROWS_WITH_AS(m.build({4, 4}), doctest::Contains("layer 2 (Reshape)"), strata::ShapeError);
}

TEST_CASE("every activation propagates NaN, as TensorFlow's; finite values keep their exact results") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor<float> y;
  nn::ReLU r;
  r.build({5});
  r.forward(Tensor<float>{{1, 5}, {nan, -0.f, -inf, inf, -2.f}}, y, {});
  CHECK(std::isnan(y[0]));  // was 0: a NaN input trained the weights to NaN while the loss stayed finite
  CHECK(y[1] == 0.f);
  CHECK_FALSE(std::signbit(y[1]));  // relu(-0) = +0, as before: the pinned CPU results keep their bits
  CHECK(y[2] == 0.f);
  CHECK(y[3] == inf);
  CHECK(y[4] == 0.f);
  nn::Sigmoid sg;
  sg.build({1});
  sg.forward(Tensor<float>{{1, 1}, {nan}}, y, {});
  CHECK(std::isnan(y[0]));
  nn::Tanh th;
  th.build({1});
  th.forward(Tensor<float>{{1, 1}, {nan}}, y, {});
  CHECK(std::isnan(y[0]));
  nn::Softmax s;
  s.build({3});
  s.forward(Tensor<float>{{2, 3}, {1.f, nan, 2.f, 1.f, 2.f, 3.f}}, y, {});
  for (std::size_t j = 0; j < 3; ++j) CHECK(std::isnan(y[j]));  // the row with a NaN is all NaN
  for (std::size_t j = 3; j < 6; ++j) CHECK(std::isfinite(y[j]));  // the other row is untouched
  // the fused Dense + ReLU path too
  nn::Dense d{2, {.activation = nn::Activation::ReLU}};
  d.build({2});
  std::vector<float> k{-1.f, -1.f, -1.f, -1.f}, b{0.f, 0.f}, gk(4), gb(2);
  const nn::ParamRef refs[] = {{k, gk}, {b, gb}};
  d.bind(refs);
  d.forward(Tensor<float>{{2, 2}, {nan, 1.f, 1.f, 1.f}}, y, {});
  CHECK(std::isnan(y[0]));
  CHECK(std::isnan(y[1]));
  CHECK(y[2] == 0.f);
  CHECK(y[3] == 0.f);
}

TEST_CASE("a model's prediction of a NaN input is NaN through ReLU layers") {
  auto model = nn::Sequential{nn::Input{{2}}, nn::Dense{4, {.activation = nn::Activation::ReLU}}, nn::Dense{3},
                              nn::ReLU{}, nn::Dense{2}};
  model.compile(nn::SGD{0.1}, nn::MeanSquaredError{});
  const auto p = model.predict(Tensor<float>{{2, 2}, {std::numeric_limits<float>::quiet_NaN(), 1.f, 0.5f, 1.f}});
  CHECK(std::isnan(p[0]));
  CHECK(std::isnan(p[1]));
  CHECK(std::isfinite(p[2]));
  CHECK(std::isfinite(p[3]));
}

// The host's ReLU gradient loop (spelled for GCC to vectorize) against the
// element body the CUDA kernels run: the same bits, NaN, infinities, signed
// zeros and a dz that is dy included.
TEST_CASE("host relu_backward equals bodies::ReLU::grad bit for bit") {
  namespace k = strata::kernels;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y{1.f, 0.f, -0.f, -2.f, nan, inf, -inf, 3.5f, 1e-30f}, dy{2.f, 3.f, 4.f, 5.f, 6.f, nan, 7.f, -inf, -0.f};
  for (std::size_t i = 0; i < 40; ++i) {  // past any vector width
    y.push_back(static_cast<float>(i % 7) - 3.f);
    dy.push_back(0.25f * static_cast<float>(i) - 4.f);
  }
  std::vector<float> dz(y.size()), in_place = dy;
  k::host::relu_backward(y.data(), dy.data(), dz.data(), y.size());
  k::host::relu_backward(y.data(), in_place.data(), in_place.data(), y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    CAPTURE(i);
    const float want = k::bodies::ReLU{}.grad(0.f, y[i], dy[i]);
    CHECK(std::memcmp(&dz[i], &want, sizeof want) == 0);
    CHECK(std::memcmp(&in_place[i], &want, sizeof want) == 0);
  }
}

// The host's image ops (row-at-a-time copies and scatters: its fast paths)
// against the element bodies the CUDA kernels run per thread
// (kernels/bodies/windows.hpp): the same bits, for valid and same padding,
// strides, and windows that overlap or skip inputs.
TEST_CASE("host im2col, col2im and max pooling equal the per-element bodies bit for bit") {
  namespace k = strata::kernels;
  struct Case {
    std::size_t h, w, c, kh, kw, sh, sw, pt, pl, oh, ow;
  };
  for (const Case& t : {Case{5, 6, 2, 3, 3, 1, 1, 0, 0, 3, 4}, Case{5, 6, 3, 3, 2, 2, 2, 1, 0, 3, 3},
                        Case{4, 4, 1, 2, 2, 2, 2, 0, 0, 2, 2}, Case{7, 5, 2, 3, 3, 3, 2, 1, 1, 3, 3}}) {
    const k::Window2D g{.batch = 2, .h = t.h, .w = t.w, .c = t.c, .kh = t.kh, .kw = t.kw, .sh = t.sh, .sw = t.sw,
                        .pad_top = t.pt, .pad_left = t.pl, .oh = t.oh, .ow = t.ow};
    CAPTURE(t.h);
    CAPTURE(t.kh);
    CAPTURE(t.sh);
    const std::size_t in = g.batch * g.h * g.w * g.c, cols = g.batch * g.oh * g.ow * g.kh * g.kw * g.c,
                      out = g.batch * g.oh * g.ow * g.c;
    std::vector<float> x(in), col(cols), dy(out);
    strata::Rng rng{t.h * 100 + t.kh};
    for (auto& e : x) e = 2.f * rng.uniform() - 1.f;
    for (auto& e : col) e = 2.f * rng.uniform() - 1.f;
    for (auto& e : dy) e = 2.f * rng.uniform() - 1.f;
    x[3] = x[4];  // a tie: the first maximum wins in both

    std::vector<float> fast(cols), body(cols);
    k::host::im2col(g, x.data(), fast.data());
    for (std::size_t e = 0; e < cols; ++e) body[e] = k::bodies::im2col_element(g, x.data(), e);
    CHECK(std::memcmp(fast.data(), body.data(), cols * sizeof(float)) == 0);

    std::vector<float> dx_fast(in), dx_body(in);
    k::host::col2im(g, col.data(), dx_fast.data());
    for (std::size_t e = 0; e < in; ++e) dx_body[e] = k::bodies::col2im_element(g, col.data(), e);
    CHECK(std::memcmp(dx_fast.data(), dx_body.data(), in * sizeof(float)) == 0);

    if (t.pt == 0 && t.pl == 0) {  // pooling windows (valid: every window has a tap)
      std::vector<float> y_fast(out), y_body(out);
      std::vector<std::uint32_t> arg_fast(out), arg_body(out);
      k::host::max_pool(g, x.data(), y_fast.data(), arg_fast.data());
      for (std::size_t e = 0; e < out; ++e) y_body[e] = k::bodies::max_pool_element(g, x.data(), e, &arg_body[e]);
      CHECK(std::memcmp(y_fast.data(), y_body.data(), out * sizeof(float)) == 0);
      CHECK(arg_fast == arg_body);
      k::host::max_pool_backward(g, dy.data(), arg_fast.data(), dx_fast.data());
      for (std::size_t e = 0; e < in; ++e)
        dx_body[e] = k::bodies::max_pool_backward_element(g, dy.data(), arg_fast.data(), e);
      CHECK(std::memcmp(dx_fast.data(), dx_body.data(), in * sizeof(float)) == 0);
    }
  }
}

}  // namespace layers_test
