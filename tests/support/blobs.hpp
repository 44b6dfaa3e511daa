// A small, learnable 3-class problem shared by the model tests: the class
// is which of 3 input blocks (of 2 features) has the largest sum; and the
// small MLP the parameter-server tests train on it under any strategy.
#pragma once

#include <cstdint>
#include <filesystem>
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

//! A checkpoint's round trip (the ZeRO resume tests, in one process and
//! across workers): a model of `make` in `s`'s scope (its executor options
//! set by the caller) on blobs(60, 5) in batches of 12, an epoch of Adam
//! 0.01 (seed 3), then (`save`) a checkpoint at `path`, or (`load`) the
//! model built and that checkpoint loaded instead of the epoch; then an
//! epoch more. The weights. Across workers every worker calls it (saving
//! joins the shards, the chief writes).
template <class S, class Make>
std::vector<float> epoch_saved_epoch(S& s, Make make, const std::filesystem::path& path, bool save, bool load) {
  namespace nn = strata::nn;
  const Blobs data = blobs(60, 5);
  auto m = s.scope(make);
  m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  auto ds = s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(12));
  if (load) {
    m.build(strata::Shape{6});
    m.load_checkpoint(path);
  } else {
    m.fit(ds, {.epochs = 1, .verbose = nn::Verbosity::Silent});
  }
  if (save) m.save_checkpoint(path);
  m.fit(ds, {.epochs = 1, .verbose = nn::Verbosity::Silent});
  return flat_weights(m);
}

}  // namespace strata_test
