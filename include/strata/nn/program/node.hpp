#pragma once
//! The functional model's graph (Keras' functional API): a Node is a value
//! in the graph (the input, or a layer applied to nodes); calling a layer
//! on nodes makes a new node; strata::nn::Model{input, output} (nn/model/model.hpp)
//! trains the layers between them under any strategy.
//!   strata::nn::Node x = strata::nn::Input{{64}};
//!   strata::nn::Node h = strata::nn::Dense{64, {.activation = strata::nn::Activation::ReLU}}(x);
//!   strata::nn::Node y = strata::nn::Dense{10}(strata::nn::Add{}(x, h));   // a residual block
//!   auto model = strategy.scope([&] { return strata::nn::Model{x, y}; });
//! A node's layer is a copy of the layer it was called on (the layer
//! object itself stays unbuilt and may be applied again: a new layer each
//! time, with parameters of its own).

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/layers/layer.hpp>
#include <strata/nn/layers/merge.hpp>
#include <strata/tensor/shape.hpp>

namespace strata::nn {

//! The per-sample input shape: a functional graph's first node, or the
//! first element of a Sequential.
struct Input {
  Shape shape;
};

namespace detail {
//! A node's input that is the model's input, not another node.
inline constexpr std::size_t graph_input = static_cast<std::size_t>(-1);

//! The nodes made from one Input, in the order they were made (so every
//! node comes after its inputs).
struct GraphState {
  Shape input;
  std::vector<std::unique_ptr<Layer>> layers;    // node i's layer
  std::vector<std::vector<std::size_t>> inputs;  // node i's inputs (graph_input: the model's input)
};
}  // namespace detail

class Node {
 public:
  //! The input of a new graph: its per-sample shape.
  Node(Input in)  // NOLINT: implicit, as Keras' `x = keras.Input(shape)`
      : g_(std::make_shared<detail::GraphState>()), id_(detail::graph_input) {
    g_->input = std::move(in.shape);
  }

  //! A copy of `layer` applied to `inputs` (Layer::operator() calls this).
  static Node apply(const Layer& layer, std::initializer_list<const Node*> inputs) {
    const bool merge = dynamic_cast<const Merge*>(&layer) != nullptr;
    if (!merge && inputs.size() != 1)
      throw Error(layer.kind() + " takes one input, but was called on " + std::to_string(inputs.size()) +
                  " nodes (Add or Concatenate merge several)");
    if (merge && inputs.size() < 2)
      throw Error(layer.kind() + " merges two or more inputs, but was called on " + std::to_string(inputs.size()));
    const auto g = (*inputs.begin())->g_;
    std::vector<std::size_t> in;
    for (const Node* n : inputs) {
      if (n->g_ != g)
        throw Error(layer.kind() + ": its inputs come from different graphs (each strata::nn::Input starts one); a "
                    "model has one input");
      in.push_back(n->id_);
    }
    g->layers.push_back(layer.clone());
    g->inputs.push_back(std::move(in));
    return Node(g, g->layers.size() - 1);
  }

  //! Whether this node is its graph's input.
  [[nodiscard]] bool is_input() const noexcept { return id_ == detail::graph_input; }
  //! The graph this node belongs to (shared by every node made from one Input).
  [[nodiscard]] const std::shared_ptr<detail::GraphState>& graph() const noexcept { return g_; }
  //! Its index in the graph's nodes (detail::graph_input for the input).
  [[nodiscard]] std::size_t id() const noexcept { return id_; }

 private:
  Node(std::shared_ptr<detail::GraphState> g, std::size_t id) : g_(std::move(g)), id_(id) {}
  std::shared_ptr<detail::GraphState> g_;
  std::size_t id_;
};

namespace detail {
//! The nodes `output` depends on, in graph order, as a program's layers and
//! edges (indices renumbered; graph_input stays). Refuses an output that is
//! the input or of another graph than `input`.
struct GraphCut {
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<std::vector<std::size_t>> inputs;
};
inline GraphCut cut_graph(const Node& input, const Node& output) {
  if (!input.is_input())
    throw Error("Model: its first argument must be the graph's Input node (strata::nn::Node x = strata::nn::Input{...})");
  if (output.graph() != input.graph())
    throw Error("Model: the output node was not made from this input (it belongs to another graph)");
  if (output.is_input()) throw Error("Model: the output is the input itself: the model has no layers");
  const GraphState& g = *output.graph();
  std::vector<char> used(g.layers.size(), 0);
  used[output.id()] = 1;
  for (std::size_t i = output.id() + 1; i-- > 0;)
    if (used[i])
      for (std::size_t p : g.inputs[i])
        if (p != graph_input) used[p] = 1;
  std::vector<std::size_t> index(g.layers.size(), graph_input);
  GraphCut cut;
  for (std::size_t i = 0; i <= output.id(); ++i) {
    if (!used[i]) continue;
    index[i] = cut.layers.size();
    cut.layers.push_back(g.layers[i]->clone());
    std::vector<std::size_t> in;
    for (std::size_t p : g.inputs[i]) in.push_back(p == graph_input ? graph_input : index[p]);
    cut.inputs.push_back(std::move(in));
  }
  return cut;
}
}  // namespace detail

}  // namespace strata::nn
