#pragma once
// The tensor-parallel tests' model and data (tests/parallel/tensor/tensor_parallel_test.cpp,
// tests/parallel/tensor/tensor_pipeline_test.cpp, tests/mpi/): one pre-norm transformer block
// small enough to train in a test, token sequences to train it on (the same on
// every worker: a seeded draw), the weights flattened for comparison, and the
// refusal and failure runs both strategies' tests make of it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>

#include "support/max_diff.hpp"

namespace strata_test {

// Sequences of 8 tokens of 13 (next-token labels).
struct Tokens {
  strata::Tensor<float> x{{48, 8}}, y{{48, 8}};
  Tokens() {
    strata::Rng rng{5};
    for (std::size_t i = 0; i < 48; ++i) {
      std::size_t v = static_cast<std::size_t>(rng.uniform() * 13);
      for (std::size_t t = 0; t < 8; ++t) {
        x[i * 8 + t] = static_cast<float>(v);
        v = (v * 3 + 1 + static_cast<std::size_t>(rng.uniform() * 2)) % 13;
        y[i * 8 + t] = static_cast<float>(v);
      }
    }
  }
};

// One pre-norm transformer block of width 16, `heads` heads: an attention layer and an MLP pair to split.
inline strata::nn::Model tiny_gpt(std::size_t heads = 4) {
  namespace nn = strata::nn;
  nn::Node in = nn::Input{{8}};
  nn::Node h = nn::PositionEmbedding{}(nn::Embedding{13, 16}(in));
  h = nn::Add{}(h, nn::MultiHeadAttention{{.heads = heads, .causal = true}}(nn::LayerNorm{}(h)));
  nn::Node f = nn::Dense{64, {.activation = nn::Activation::GELU}}(nn::LayerNorm{}(h));
  h = nn::Add{}(h, nn::Dense{16}(f));
  return nn::Model{in, nn::Dense{13}(nn::LayerNorm{}(h))};
}

// What building tiny_gpt(heads), compiled, in `s`'s scope throws as a strata::Error ("" and a failed
// test when it builds): the refusals of a split that cannot be.
template <class S>
std::string build_error(S& s, std::size_t heads) {
  namespace nn = strata::nn;
  auto model = s.scope([&] { return tiny_gpt(heads); });
  model.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  try {
    model.build(strata::Shape{8});
  } catch (const strata::Error& e) {
    return e.what();
  }
  FAIL("built");
  return {};
}

// tiny_gpt trained in `s` by custom steps (SGD, batches of 12 of Tokens) with
// gradient hook `hook` until a step throws: its message ("" if none did), and
// the time from the first step.
template <class S, class Hook>
std::pair<std::string, std::chrono::steady_clock::duration> steps_until_error(S& s, Hook&& hook) {
  namespace nn = strata::nn;
  const Tokens d;
  auto model = s.scope([] { return tiny_gpt(); });
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 1});
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    for (const auto& b : s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12))) model.train_step(b, hook);
  } catch (const std::exception& e) {
    what = e.what();
  }
  return {what, std::chrono::steady_clock::now() - t0};
}

inline std::vector<float> flat(const std::vector<strata::nn::NamedTensor>& ws) {
  std::vector<float> out;
  for (const auto& w : ws) out.insert(out.end(), w.value.begin(), w.value.end());
  return out;
}

}  // namespace strata_test
