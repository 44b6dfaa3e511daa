// A small, learnable 3-class problem shared by the model tests: the class
// is which of 3 input blocks (of 2 features) has the largest sum; and the
// small MLP the parameter-server tests train on it under any strategy.
#pragma once

#include <cstdint>
#include <vector>

#include <strata/data/dataset.hpp>
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

inline strata::nn::Sequential blobs_mlp() {
  namespace nn = strata::nn;
  return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::Dense{8}, nn::ReLU{}, nn::Dense{3}};
}

//! blobs_mlp() made in `s`'s scope and fitted on `data` (Adam 0.01, seed 7)
//! in batches of `batch`; its history into `h` when given.
template <class S>
strata::nn::Sequential fit_blobs(S& s, const Blobs& data, std::size_t batch, int epochs,
                                 strata::nn::History* h = nullptr) {
  namespace nn = strata::nn;
  auto model = s.scope(blobs_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 7});
  auto hist = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(batch)),
                        {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  if (h) *h = hist;
  return model;
}

//! Every weight of `m`, flattened in get_weights() order.
inline std::vector<float> flat_weights(const strata::nn::Sequential& m) {
  std::vector<float> out;
  for (const auto& w : m.get_weights()) out.insert(out.end(), w.value.begin(), w.value.end());
  return out;
}

}  // namespace strata_test
