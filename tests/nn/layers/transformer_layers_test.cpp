// The layers and ops a small GPT needs (issue 26): Dense on the last axis,
// Embedding, PositionEmbedding, causal MultiHeadAttention and the
// per-position masked sparse cross-entropy and accuracy. Values against
// direct double-precision computations, numeric-vs-analytic gradients
// (tests/nn/layers/gradcheck.hpp), causality, the loss's mask and scale contract, the
// unchanged bits of the per-example loss, errors, empty batches, and a tiny
// language model that trains under MirroredStrategy.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/nn.hpp>
#include <strata/nn/layers/attention.hpp>
#include <strata/nn/layers/embedding.hpp>
#include <strata/nn/layers/position_embedding.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "nn/layers/gradcheck.hpp"

namespace transformer_layers_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using strata::Shape;
using strata::Tensor;

namespace {

//! Parameters for a built layer: seeded values in [-scale, scale), gradients, refs bound.
struct Params {
  std::vector<std::vector<float>> values, grads;
  std::vector<nn::ParamRef> refs;
  Params(nn::Layer& layer, std::uint64_t seed, float scale = 0.5f) {
    const auto specs = layer.params();
    values.resize(specs.size());
    grads.resize(specs.size());
    for (std::size_t p = 0; p < specs.size(); ++p) {
      values[p].resize(specs[p].shape.elements());
      grads[p].assign(values[p].size(), 0.f);
      strata::Rng rng{strata::detail::mix(seed, p)};
      for (auto& v : values[p]) v = scale * (2.f * rng.uniform() - 1.f);
    }
    for (std::size_t p = 0; p < specs.size(); ++p) refs.push_back({values[p], grads[p]});
    layer.bind(refs);
  }
};

Tensor<float> uniform(const Shape& s, std::uint64_t seed, float scale = 1.f) {
  Tensor<float> t{s};
  strata::Rng rng{seed};
  for (auto& v : t) v = scale * (2.f * rng.uniform() - 1.f);
  return t;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

//! Multi-head self-attention computed directly in double: x [b, t, w] row-major,
//! the layer's parameters (qkv head-major), `causal` masking.
std::vector<double> attention_ref(const Tensor<float>& x, const Params& p, std::size_t heads, bool causal) {
  const std::size_t b = x.shape()[0], t = x.shape()[1], w = x.shape()[2], dh = w / heads;
  const auto& wqkv = p.values[0];
  const auto& bqkv = p.values[1];
  const auto& wo = p.values[2];
  const auto& bo = p.values[3];
  std::vector<double> y(b * t * w);
  for (std::size_t e = 0; e < b; ++e) {
    std::vector<double> qkv(t * 3 * w), ctx(t * w);
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < 3 * w; ++j) {
        double s = bqkv[j];
        for (std::size_t k = 0; k < w; ++k) s += static_cast<double>(x[(e * t + i) * w + k]) * wqkv[k * 3 * w + j];
        qkv[i * 3 * w + j] = s;
      }
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < t; ++i) {
        const std::size_t keys = causal ? i + 1 : t;
        std::vector<double> a(keys);
        double m = -1e300;
        for (std::size_t j = 0; j < keys; ++j) {
          double s = 0;
          for (std::size_t d = 0; d < dh; ++d) s += qkv[i * 3 * w + h * 3 * dh + d] * qkv[j * 3 * w + h * 3 * dh + dh + d];
          a[j] = s / std::sqrt(static_cast<double>(dh));
          m = std::max(m, a[j]);
        }
        double z = 0;
        for (auto& v : a) z += (v = std::exp(v - m));
        for (std::size_t d = 0; d < dh; ++d) {
          double s = 0;
          for (std::size_t j = 0; j < keys; ++j) s += a[j] / z * qkv[j * 3 * w + h * 3 * dh + 2 * dh + d];
          ctx[i * w + h * dh + d] = s;
        }
      }
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < w; ++j) {
        double s = bo[j];
        for (std::size_t k = 0; k < w; ++k) s += ctx[i * w + k] * wo[k * w + j];
        y[(e * t + i) * w + j] = s;
      }
  }
  return y;
}

}  // namespace

TEST_CASE("Dense on the last axis: [T, in] -> [T, units], each position the rank-1 layer's row, bitwise") {
  nn::Dense seq{5, {.activation = nn::Activation::Tanh}};
  CHECK(seq.build({3, 4}) == Shape{3, 5});
  Params p(seq, 7);
  nn::Dense flat{5, {.activation = nn::Activation::Tanh}};
  flat.build({4});
  flat.bind(p.refs);
  const Tensor<float> x = uniform({2, 3, 4}, 1);
  Tensor<float> y, yflat;
  seq.forward(x, y, {});
  Tensor<float> x2 = x;
  x2.reshape(Shape{6, 4});
  flat.forward(x2, yflat, {});
  CHECK(y.shape() == Shape{2, 3, 5});
  CHECK(same_bits(y.span(), yflat.span()));
  for (bool bias : {true, false})
    for (const Shape& s : {Shape{3, 4}, Shape{2, 2, 3}}) {
      CAPTURE(s.str());
      nn::Dense d{6, {.activation = nn::Activation::GELU, .use_bias = bias}};
      const auto r = strata_test::gradcheck(d, s, 2);
      CHECK_MESSAGE(r.ok, r.report);
    }
  nn::Dense empty{3};
  const auto r0 = strata_test::gradcheck(empty, {4, 2}, 0);
  CHECK_MESSAGE(r0.ok, r0.report);
  CHECK_THROWS_WITH_AS(nn::Dense(3, 4).build({2, 5}), doctest::Contains("declared with input size 3"),
                       strata::ShapeError);
}

TEST_CASE("Embedding: rows of the table by id, its gradient the sum over each id's positions") {
  nn::Embedding emb{5, 3};
  CHECK(emb.build({4}) == Shape{4, 3});
  REQUIRE(emb.params().size() == 1);
  CHECK(emb.params()[0].name == "embeddings");
  CHECK(emb.params()[0].shape == Shape{5, 3});
  // the initializer: uniform in +-0.05 (Keras' default), drawn as a glorot limit
  const nn::ParamSpec spec = emb.params()[0];
  CHECK(std::sqrt(6.f / static_cast<float>(spec.fan_in + spec.fan_out)) == doctest::Approx(0.05f).epsilon(1e-6));
  Params p(emb, 3);
  const Tensor<float> ids{{2, 4}, {0.f, 4.f, 4.f, 2.f, 1.f, 0.f, 3.f, 4.f}};
  Tensor<float> y;
  emb.forward(ids, y, {});
  REQUIRE(y.shape() == Shape{2, 4, 3});
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 3; ++j) CHECK(y[i * 3 + j] == p.values[0][static_cast<std::size_t>(ids[i]) * 3 + j]);
  const Tensor<float> dy = uniform({2, 4, 3}, 9);
  std::fill(p.grads[0].begin(), p.grads[0].end(), 1000.f);  // overwritten, not accumulated
  emb.backward(ids, y, dy, nullptr);
  for (std::size_t v = 0; v < 5; ++v)
    for (std::size_t j = 0; j < 3; ++j) {
      float s = 0.f;  // positions in order: the op's sum, bitwise
      for (std::size_t i = 0; i < 8; ++i)
        if (ids[i] == static_cast<float>(v)) s += dy[i * 3 + j];
      CAPTURE(v);
      CHECK(p.grads[0][v * 3 + j] == s);
    }
  CHECK(p.grads[0][3 * 3] != 1000.f);  // id 3 appears once
  // L = sum(y .* dy) is linear in the table: a central difference agrees
  const double eps = 1e-2;
  for (std::size_t k : {0u, 4u, 12u, 14u}) {
    auto loss = [&] {
      Tensor<float> out;
      emb.forward(ids, out, {});
      double l = 0;
      for (std::size_t i = 0; i < out.size(); ++i) l += static_cast<double>(out[i]) * dy[i];
      return l;
    };
    const float orig = p.values[0][k];
    p.values[0][k] = orig + static_cast<float>(eps);
    const double up = loss();
    p.values[0][k] = orig - static_cast<float>(eps);
    const double down = loss();
    p.values[0][k] = orig;
    CHECK((up - down) / (2 * eps) == doctest::Approx(p.grads[0][k]).epsilon(1e-3));
  }
  // an empty batch: an empty output, a zero gradient
  Tensor<float> y0;
  emb.forward(Tensor<float>{{0, 4}}, y0, {});
  CHECK(y0.shape() == Shape{0, 4, 3});
  emb.backward(Tensor<float>{{0, 4}}, y0, Tensor<float>{{0, 4, 3}}, nullptr);
  for (float g : p.grads[0]) CHECK(g == 0.f);
}

TEST_CASE("Embedding: a bad id is an error naming its example and position; dx is refused") {
  nn::Embedding emb{4, 2};
  emb.build({3});
  Params p(emb, 1);
  Tensor<float> y;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {4.f, -1.f, 1.5f, nan, 1e30f}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(emb.forward(Tensor<float>{{2, 3}, {0.f, 1.f, 2.f, 3.f, bad, 0.f}}, y, {}),
                         doctest::Contains("at example 1, position 1 is not a token index in [0, 4)"), strata::Error);
  }
  const Tensor<float> ids{{1, 3}, {0.f, 1.f, 2.f}};
  emb.forward(ids, y, {});
  Tensor<float> dx;
  CHECK_THROWS_WITH_AS(emb.backward(ids, y, Tensor<float>{{1, 3, 2}}, &dx), doctest::Contains("not differentiable"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(nn::Embedding(0, 4), doctest::Contains("at least one token"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::Embedding(4, 0), doctest::Contains("at least 1"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::Embedding(4, 2).build({3, 2}), doctest::Contains("sequence of token ids [T]"),
                       strata::ShapeError);
  CHECK_THROWS_AS(emb.forward(Tensor<float>{{1, 4}}, y, {}), strata::ShapeError);
}

TEST_CASE("PositionEmbedding: y = x + P over every example, gradient-checked") {
  nn::PositionEmbedding pos;
  CHECK(pos.build({3, 2}) == Shape{3, 2});
  REQUIRE(pos.params().size() == 1);
  CHECK(pos.params()[0].shape == Shape{3, 2});
  CHECK(pos.params()[0].init == nn::Init::GlorotUniform);
  Params p(pos, 4);
  const Tensor<float> x = uniform({2, 3, 2}, 5);
  Tensor<float> y;
  pos.forward(x, y, {});
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(y[i] == x[i] + p.values[0][i % 6]);
  for (std::size_t batch : {0u, 1u, 4u}) {
    nn::PositionEmbedding layer;
    const auto r = strata_test::gradcheck(layer, {4, 3}, batch);
    CHECK_MESSAGE(r.ok, r.report);
  }
  CHECK_THROWS_WITH_AS(nn::PositionEmbedding{}.build({5}), doctest::Contains("per-sample [T, W]"), strata::ShapeError);
}

TEST_CASE("attention_softmax: causal rows see their past only, each row sums to 1, masked weights are 0") {
  auto& c = strata::kernels::host_compute();
  const std::size_t t = 5, blocks = 2;
  const Tensor<float> x = uniform({blocks * t, t}, 11, 4.f);
  std::vector<float> y(x.size()), full(x.size());
  c.attention_softmax(x.data(), y.data(), blocks * t, t, true);
  c.attention_softmax(x.data(), full.data(), blocks * t, t, false);
  for (std::size_t r = 0; r < blocks * t; ++r) {
    const std::size_t q = r % t;
    double m = -1e300, z = 0;
    for (std::size_t j = 0; j <= q; ++j) m = std::max(m, static_cast<double>(x[r * t + j]));
    for (std::size_t j = 0; j <= q; ++j) z += std::exp(x[r * t + j] - m);
    double sum = 0;
    for (std::size_t j = 0; j < t; ++j) {
      CAPTURE(r);
      CAPTURE(j);
      if (j > q) CHECK(y[r * t + j] == 0.f);
      else CHECK(y[r * t + j] == doctest::Approx(std::exp(x[r * t + j] - m) / z).epsilon(1e-6));
      sum += y[r * t + j];
      CHECK(full[r * t + j] > 0.f);
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
  }
  // in place, and a NaN score makes its row's visible weights NaN, nothing else
  std::vector<float> z(x.data(), x.data() + x.size());
  z[3 * t + 1] = std::numeric_limits<float>::quiet_NaN();
  c.attention_softmax(z.data(), z.data(), blocks * t, t, true);
  for (std::size_t j = 0; j < t; ++j) CHECK((j <= 3 ? std::isnan(z[3 * t + j]) : z[3 * t + j] == 0.f));
  for (std::size_t j = 0; j < t; ++j) CHECK(z[4 * t + j] == y[4 * t + j]);
}

TEST_CASE("gemm_strided_batched is one gemm per product, bitwise") {
  auto& c = strata::kernels::host_compute();
  const Tensor<float> a = uniform({3, 4, 6}, 1), b = uniform({3, 5, 6}, 2);
  std::vector<float> batched(3 * 4 * 5), each(3 * 4 * 5);
  c.gemm_strided_batched(false, true, 4, 5, 6, 0.5f, a.data(), 6, 24, b.data(), 6, 30, 0.f, batched.data(), 5, 20, 3);
  for (std::size_t i = 0; i < 3; ++i)
    c.gemm(false, true, 4, 5, 6, 0.5f, a.data() + i * 24, 6, b.data() + i * 30, 6, 0.f, each.data() + i * 20, 5);
  CHECK(same_bits(batched, each));
}

TEST_CASE("MultiHeadAttention: values against a direct computation, causal and not") {
  for (bool causal : {true, false})
    for (std::size_t heads : {1u, 2u, 4u}) {
      CAPTURE(causal);
      CAPTURE(heads);
      nn::MultiHeadAttention attn{{.heads = heads, .causal = causal}};
      CHECK(attn.build({5, 8}) == Shape{5, 8});
      Params p(attn, 21 + heads);
      const Tensor<float> x = uniform({3, 5, 8}, 22);
      Tensor<float> y;
      attn.forward(x, y, {});
      const auto ref = attention_ref(x, p, heads, causal);
      REQUIRE(y.size() == ref.size());
      for (std::size_t i = 0; i < ref.size(); ++i) {
        CAPTURE(i);
        CHECK(y[i] == doctest::Approx(ref[i]).epsilon(1e-5).scale(1.0));  // outputs are O(1)
      }
    }
}

TEST_CASE("MultiHeadAttention: causal, a later position never changes an earlier output") {
  nn::MultiHeadAttention attn{{.heads = 2, .causal = true}};
  attn.build({6, 4});
  Params p(attn, 5);
  const Tensor<float> x = uniform({2, 6, 4}, 6);
  Tensor<float> y, y2;
  attn.forward(x, y, {});
  for (std::size_t changed = 1; changed < 6; ++changed) {
    Tensor<float> x2 = x;
    for (std::size_t j = 0; j < 4; ++j) x2[(1 * 6 + changed) * 4 + j] += 3.f;  // example 1, position `changed`
    attn.forward(x2, y2, {});
    for (std::size_t t = 0; t < 6; ++t)
      for (std::size_t j = 0; j < 4; ++j) {
        const std::size_t i0 = t * 4 + j, i1 = (6 + t) * 4 + j;
        CHECK(y2[i0] == y[i0]);  // example 0 untouched
        if (t < changed) CHECK(y2[i1] == y[i1]);
      }
    bool later_changed = false;
    for (std::size_t j = 0; j < 4; ++j) later_changed |= y2[(6 + changed) * 4 + j] != y[(6 + changed) * 4 + j];
    CHECK(later_changed);
  }
  // without the mask the first position sees the last
  nn::MultiHeadAttention full{{.heads = 2}};
  full.build({6, 4});
  full.bind(p.refs);
  Tensor<float> x3 = x;
  x3[5 * 4] += 3.f;
  full.forward(x, y, {});
  full.forward(x3, y2, {});
  CHECK(y2[0] != y[0]);
}

TEST_CASE("MultiHeadAttention: gradient-checked for the input and all four parameters") {
  for (bool causal : {true, false})
    for (std::size_t heads : {1u, 2u}) {
      CAPTURE(causal);
      CAPTURE(heads);
      nn::MultiHeadAttention attn{{.heads = heads, .causal = causal}};
      const auto r = strata_test::gradcheck(attn, {4, 6}, 2);
      CHECK_MESSAGE(r.ok, r.report);
    }
  nn::MultiHeadAttention attn{{.heads = 2, .causal = true}};
  const auto r0 = strata_test::gradcheck(attn, {3, 4}, 0);
  CHECK_MESSAGE(r0.ok, r0.report);
}

TEST_CASE("MultiHeadAttention: errors are sentences") {
  CHECK_THROWS_WITH_AS(nn::MultiHeadAttention({.heads = 0}), doctest::Contains("at least one head"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::MultiHeadAttention({.heads = 3}).build({4, 8}),
                       doctest::Contains("width 8 is not divisible by the 3 heads"), strata::ShapeError);
  CHECK_THROWS_WITH_AS(nn::MultiHeadAttention({.heads = 2}).build({8}), doctest::Contains("per-sample [T, W]"),
                       strata::ShapeError);
  CHECK_THROWS_AS(nn::MultiHeadAttention({.heads = 2}).build({0, 8}), strata::ShapeError);
  nn::MultiHeadAttention attn{{.heads = 2}};
  attn.build({3, 4});
  Params p(attn, 1);
  Tensor<float> x{{2, 3, 4}}, y{{2, 3, 4}}, dx;
  CHECK_THROWS_WITH_AS(attn.backward(x, y, y, &dx), doctest::Contains("no forward pass"), strata::Error);
  CHECK_THROWS_AS(attn.forward(Tensor<float>{{2, 3, 5}}, y, {}), strata::ShapeError);
}

TEST_CASE("per-position sparse cross-entropy: the mean over each example's unmasked positions") {
  const std::size_t b = 3, t = 4, v = 5;
  const Tensor<float> logits = uniform({b, t, v}, 31, 3.f);
  // example 0: all positions; example 1: two masked; example 2: every position masked
  const Tensor<float> labels{{b, t}, {0.f, 4.f, 2.f, 1.f, 3.f, -1.f, 0.f, -1.f, -1.f, -1.f, -1.f, -1.f}};
  const nn::SparseCategoricalCrossentropy loss{{.from_logits = true, .ignore_class = -1}};
  CHECK(loss.ignore_class() == -1);
  Tensor<float> d;
  const float scale = 0.25f;
  const double sum = loss.compute(logits, labels, &d, scale);
  double want = 0;
  std::vector<double> grad(b * t * v, 0.0);
  for (std::size_t e = 0; e < b; ++e) {
    std::size_t n = 0;
    double ex = 0;
    for (std::size_t s = 0; s < t; ++s) n += labels[e * t + s] != -1.f;
    for (std::size_t s = 0; s < t; ++s) {
      const std::size_t row = e * t + s;
      if (labels[row] == -1.f) continue;
      double m = -1e300, z = 0;
      for (std::size_t j = 0; j < v; ++j) m = std::max(m, static_cast<double>(logits[row * v + j]));
      for (std::size_t j = 0; j < v; ++j) z += std::exp(logits[row * v + j] - m);
      const auto k = static_cast<std::size_t>(labels[row]);
      ex += m + std::log(z) - logits[row * v + k];
      for (std::size_t j = 0; j < v; ++j)
        grad[row * v + j] = scale / static_cast<double>(n) * (std::exp(logits[row * v + j] - m) / z - (j == k));
    }
    if (n) want += ex / static_cast<double>(n);
  }
  CHECK(sum == doctest::Approx(want).epsilon(1e-6));
  REQUIRE(d.shape() == logits.shape());
  for (std::size_t i = 0; i < grad.size(); ++i) {
    CAPTURE(i);
    CHECK(d[i] == doctest::Approx(grad[i]).epsilon(1e-5).scale(1e-7));
  }
  for (std::size_t i = 2 * t * v; i < 3 * t * v; ++i) CHECK(d[i] == 0.f);  // the all-masked example: no gradient
  for (std::size_t j = 0; j < v; ++j) CHECK(d[(1 * t + 1) * v + j] == 0.f);  // a masked position

  // the scale contract: per-example losses, so halves of the batch (replicas) give the whole's gradient rows
  Tensor<float> d_first, d_rest;
  const Tensor<float> l_first{{1, t}, {0.f, 4.f, 2.f, 1.f}}, l_rest{{2, t}, {3.f, -1.f, 0.f, -1.f, -1.f, -1.f, -1.f, -1.f}};
  Tensor<float> p_first{{1, t, v}}, p_rest{{2, t, v}};
  std::copy_n(logits.data(), t * v, p_first.data());
  std::copy_n(logits.data() + t * v, 2 * t * v, p_rest.data());
  const double s1 = loss.compute(p_first, l_first, &d_first, scale), s2 = loss.compute(p_rest, l_rest, &d_rest, scale);
  CHECK(s1 + s2 == doctest::Approx(sum).epsilon(1e-12));
  CHECK(same_bits(d_first.span(), std::span<const float>(d.data(), t * v)));
  CHECK(same_bits(d_rest.span(), std::span<const float>(d.data() + t * v, 2 * t * v)));

  // without ignore_class a -1 label is an error naming example and position
  const nn::SparseCategoricalCrossentropy plain{{.from_logits = true}};
  CHECK_THROWS_WITH_AS((void)plain.compute(logits, labels, nullptr, 1.f),
                       doctest::Contains("label -1.000000 of example 1, position 1 is not a class index in [0, 5)"),
                       strata::Error);
  CHECK_THROWS_WITH_AS((void)loss.compute(logits, Tensor<float>{{b, t}, 7.f}, nullptr, 1.f),
                       doctest::Contains("nor the ignored class"), strata::Error);
  CHECK_THROWS_WITH_AS((void)loss.compute(logits, Tensor<float>{{b, t + 1}}, nullptr, 1.f),
                       doctest::Contains("without its last axis"), strata::ShapeError);
  // an empty batch
  Tensor<float> d0;
  CHECK(loss.compute(Tensor<float>{{0, t, v}}, Tensor<float>{{0, t}}, &d0, 1.f) == 0.0);
  CHECK(d0.shape() == Shape{0, t, v});
}

TEST_CASE("per-position cross-entropy from probabilities, and its gradient by central differences") {
  const std::size_t b = 2, t = 3, v = 4;
  Tensor<float> probs = uniform({b, t, v}, 41);
  for (auto& p : probs) p = 0.1f + 0.4f * (p + 1.f);  // in (0.1, 0.9)
  const Tensor<float> labels{{b, t}, {1.f, 3.f, -2.f, 0.f, -2.f, 2.f}};
  for (bool logits : {false, true}) {
    CAPTURE(logits);
    const nn::SparseCategoricalCrossentropy loss{{.from_logits = logits, .ignore_class = -2}};
    Tensor<float> d;
    (void)loss.compute(probs, labels, &d, 1.f);
    for (std::size_t i = 0; i < probs.size(); ++i) {
      Tensor<float> up = probs, down = probs;
      up[i] += 1e-3f;
      down[i] -= 1e-3f;
      const double num = (loss.compute(up, labels, nullptr, 1.f) - loss.compute(down, labels, nullptr, 1.f)) /
                         (static_cast<double>(up[i]) - down[i]);
      CAPTURE(i);
      CHECK(d[i] == doctest::Approx(num).epsilon(2e-3).scale(1e-3));
    }
  }
}

TEST_CASE("the per-example sparse cross-entropy keeps its bits; ignore_class masks [batch] labels too") {
  const Tensor<float> logits = uniform({6, 7}, 51, 3.f);
  const Tensor<float> labels{{6}, {0.f, 6.f, 3.f, 3.f, 1.f, 2.f}};
  for (bool from_logits : {true, false}) {
    CAPTURE(from_logits);
    Tensor<float> pred = logits;
    if (!from_logits)
      for (auto& p : pred) p = 0.05f + 0.9f * (p + 3.f) / 6.f;
    const nn::SparseCategoricalCrossentropy loss{{.from_logits = from_logits}};
    Tensor<float> d;
    const double sum = loss.compute(pred, labels, &d, 1.f / 6);
    std::vector<float> want_d(pred.size());
    double want = 0;
    strata::kernels::host::sparse_crossentropy(pred.data(), labels.data(), want_d.data(), 1.f / 6, 6, 7, from_logits,
                                               &want);
    CHECK(sum == want);
    CHECK(same_bits(d.span(), want_d));
    Tensor<float> labels_col = labels;
    labels_col.reshape(Shape{6, 1});
    CHECK(loss.compute(pred, labels_col, nullptr, 1.f) == loss.compute(pred, labels, nullptr, 1.f));
  }
  const nn::SparseCategoricalCrossentropy masked{{.from_logits = true, .ignore_class = 3}};
  const nn::SparseCategoricalCrossentropy plain{{.from_logits = true}};
  Tensor<float> dm;
  const double sm = masked.compute(logits, labels, &dm, 1.f);
  double want = 0;
  for (std::size_t i : {0u, 1u, 4u, 5u}) {
    Tensor<float> row{{1, 7}}, lab{{1}, {labels[i]}};
    std::copy_n(logits.data() + i * 7, 7, row.data());
    want += plain.compute(row, lab, nullptr, 1.f);
  }
  CHECK(sm == doctest::Approx(want).epsilon(1e-6));
  for (std::size_t j = 0; j < 14; ++j) CHECK(dm[2 * 7 + j] == 0.f);  // examples 2 and 3: label 3, masked
}

TEST_CASE("accuracy per position, masked by the loss's ignore_class") {
  const std::size_t b = 2, t = 3, v = 3;
  // argmaxes: example 0: 0, 1, 2; example 1: 2, 2, 0
  const Tensor<float> pred{{b, t, v}, {5.f, 1.f, 0.f, 0.f, 5.f, 1.f, 0.f, 1.f, 5.f,  //
                                       0.f, 1.f, 5.f, 0.f, 1.f, 5.f, 5.f, 0.f, 1.f}};
  const Tensor<float> labels{{b, t}, {0.f, 2.f, 2.f, 2.f, -1.f, 1.f}};
  nn::Accuracy acc;
  acc.set_loss(nn::SparseCategoricalCrossentropy{{.ignore_class = -1}});
  // example 0: 2 of 3 hits; example 1: 1 of its 2 unmasked
  CHECK(acc.total(pred, labels) == doctest::Approx(2.0 / 3 + 1.0 / 2));
  nn::SparseCategoricalAccuracy sparse;
  sparse.set_loss(nn::SparseCategoricalCrossentropy{{.ignore_class = -1}});
  CHECK(sparse.total(pred, labels) == acc.total(pred, labels));
  const Tensor<float> all_masked{{b, t}, -1.f};
  CHECK(acc.total(pred, all_masked) == 0.0);
  nn::Accuracy unmasked;
  unmasked.set_loss(nn::SparseCategoricalCrossentropy{});
  CHECK_THROWS_WITH_AS((void)unmasked.total(pred, labels), doctest::Contains("example 1, position 1"), strata::Error);
  CHECK(unmasked.total(pred, Tensor<float>{{b, t}, {0.f, 1.f, 2.f, 2.f, 2.f, 0.f}}) == doctest::Approx(2.0));
}

namespace {

//! Toy next-token data: sequences counting up modulo `vocab` from a seeded
//! start (with a seeded skip of 1 or 2, which the model reads from the
//! context); labels are the inputs shifted by one, the last position masked (-1).
struct Toy {
  Tensor<float> x, y;
};
Toy toy(std::size_t n, std::size_t t, std::size_t vocab, std::uint64_t seed) {
  Toy d{Tensor<float>{{n, t}}, Tensor<float>{{n, t}}};
  strata::Rng rng{seed};
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t start = rng.below(vocab), skip = 1 + rng.below(2);
    for (std::size_t s = 0; s < t; ++s) {
      d.x[i * t + s] = static_cast<float>((start + s * skip) % vocab);
      d.y[i * t + s] = s + 1 < t ? static_cast<float>((start + (s + 1) * skip) % vocab) : -1.f;
    }
  }
  return d;
}

template <class S>
std::pair<std::vector<float>, std::vector<double>> train_toy(S& strategy, const Toy& data, int epochs) {
  const std::size_t t = data.x.shape()[1], vocab = 8;
  auto model = strategy.scope([&] {
    return nn::Sequential{nn::Input{{t}}, nn::Embedding{vocab, 16}, nn::PositionEmbedding{},
                          nn::MultiHeadAttention{{.heads = 2, .causal = true}}, nn::Dense{vocab}};
  });
  model.compile(nn::Adam{0.02}, nn::SparseCategoricalCrossentropy{{.from_logits = true, .ignore_class = -1}},
                {nn::Accuracy{}}, {.seed = 3});
  const auto h = model.fit(strategy.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
                           {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  return {strata_test::flat_weights(model), h.at("loss")};
}

}  // namespace

TEST_CASE("a tiny causal language model trains under MirroredStrategy: 2 replicas as 1 within rounding, repeatable") {
  const Toy data = toy(64, 6, 8, 17);
  strata::MirroredStrategy one{strata::cpu_replicas(1)}, two{strata::cpu_replicas(2)};
  const auto [w1, loss1] = train_toy(one, data, 12);
  const auto [w2, loss2] = train_toy(two, data, 12);
  REQUIRE(loss1.size() == 12);
  CHECK(std::isfinite(loss1.back()));
  CHECK(loss1.back() < 0.25 * loss1.front());
  // two replicas sum their halves' gradients in another order than one
  // replica's products: equal within float rounding, not bitwise
  for (std::size_t e = 0; e < loss1.size(); ++e) CHECK(loss2[e] == doctest::Approx(loss1[e]).epsilon(1e-3));
  REQUIRE(w1.size() == w2.size());
  double worst = 0;
  for (std::size_t i = 0; i < w1.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(w1[i]) - w2[i]));
  CHECK(worst < 1e-3);
  // and a run repeats bitwise
  strata::MirroredStrategy again{strata::cpu_replicas(2)};
  const auto [w3, loss3] = train_toy(again, data, 12);
  CHECK(same_bits(w2, w3));
}

}  // namespace transformer_layers_test
