// A small, learnable 3-class problem shared by the model tests: the class
// is which of 3 input blocks (of 2 features) has the largest sum.
#pragma once

#include <cstdint>

#include <strata/nn.hpp>

namespace strata_test {

struct Blobs {
  strata::Tensor<float> x;
  strata::Tensor<std::int32_t> y;
};
inline Blobs blobs(std::size_t n, std::uint64_t seed) {
  Blobs b{strata::Tensor<float>{{n, 6}}, strata::Tensor<std::int32_t>{{n}}};
  strata::nn::Rng rng{seed};
  for (std::size_t i = 0; i < n; ++i) {
    float best = -1e9f;
    for (std::size_t j = 0; j < 6; ++j) b.x[i * 6 + j] = rng.uniform() * 2.f - 1.f;
    for (std::int32_t c = 0; c < 3; ++c) {
      const float s = b.x[i * 6 + 2 * c] + b.x[i * 6 + 2 * c + 1];
      if (s > best) best = s, b.y[i] = c;
    }
  }
  return b;
}

}  // namespace strata_test
