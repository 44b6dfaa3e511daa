#pragma once
// The tensor-parallel tests' model and data (tests/tensor_parallel_test.cpp,
// tests/mpi/tensor_parallel_test.cpp): one pre-norm transformer block small
// enough to train in a test, token sequences to train it on (the same on
// every worker: a seeded draw), and the weights flattened for comparison.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include <doctest/doctest.h>

#include <strata/nn.hpp>

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

inline std::vector<float> flat(const std::vector<strata::nn::NamedTensor>& ws) {
  std::vector<float> out;
  for (const auto& w : ws) out.insert(out.end(), w.value.begin(), w.value.end());
  return out;
}

inline float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace strata_test
