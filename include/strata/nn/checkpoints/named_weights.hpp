#pragma once
//! A model's flat parameters as named tensors ("<layer>/<param>", Keras'
//! get_weights) and back: what Sequential::get_weights and set_weights do
//! with the executor's logical value.
//!   auto ws = strata::nn::detail::named_weights(program, executor.value());
//!   executor.assign(strata::nn::detail::flat_weights(ws, ws, program.total));

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/nn/program/model_program.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::nn::detail {

//! `v` (the flat parameters of `m`) cut into its layers' named tensors.
inline std::vector<io::NamedTensor> named_weights(const LayerProgram& m, const Tensor<float>& v) {
  std::vector<io::NamedTensor> out;
  std::size_t off = 0;
  for (std::size_t l = 0; l < m.layers.size(); ++l)
    for (const auto& p : m.specs[l]) {
      Tensor<float> t{p.shape};
      std::copy_n(v.data() + off, t.size(), t.data());
      off += t.size();
      out.push_back({m.names[l] + "/" + p.name, std::move(t)});
    }
  return out;
}

//! `ws` laid end to end (`total` elements), checked name by name and shape
//! by shape against the model's own `mine`; any mismatch is a ShapeError.
inline Tensor<float> flat_weights(const std::vector<io::NamedTensor>& ws, const std::vector<io::NamedTensor>& mine,
                                  std::size_t total) {
  if (ws.size() != mine.size())
    throw ShapeError("set_weights: the model has " + std::to_string(mine.size()) + " parameter tensors, got " +
                     std::to_string(ws.size()));
  Tensor<float> flat{Shape{total}};
  std::size_t off = 0;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (ws[i].name != mine[i].name || ws[i].value.shape() != mine[i].value.shape())
      throw ShapeError("set_weights: tensor " + std::to_string(i) + " is " + ws[i].name + " " +
                       ws[i].value.shape().str() + " but the model expects " + mine[i].name + " " +
                       mine[i].value.shape().str());
    std::copy_n(ws[i].value.data(), ws[i].value.size(), flat.data() + off);
    off += ws[i].value.size();
  }
  return flat;
}

}  // namespace strata::nn::detail
