#pragma once
//! Sequential: a stack of layers, Keras-style — a Model (nn/model/model.hpp)
//! whose layers each take the one before them.
//!   auto model = strategy.scope([] {
//!     return strata::nn::Sequential{strata::nn::Input{{28, 28}}, strata::nn::Flatten{}, strata::nn::Dense{10}};
//!   });
//!   model.compile(strata::nn::Adam{1e-3}, strata::nn::SparseCategoricalCrossentropy{{.from_logits = true}},
//!                 {strata::nn::Accuracy{}});
//!   model.fit(strategy.distribute(train), {.epochs = 5});

#include <concepts>
#include <memory>
#include <type_traits>
#include <utility>

#include <strata/nn/model/model.hpp>

namespace strata::nn {

class Sequential : public Model {
 public:
  //! Layers in order; an Input{shape} first fixes the per-sample input shape
  //! (otherwise the first batch does).
  template <class... L>
    requires((std::derived_from<std::remove_cvref_t<L>, Layer> || std::same_as<std::remove_cvref_t<L>, Input>) && ...)
  explicit Sequential(L&&... layers) : Model("Sequential") {
    (add(std::forward<L>(layers)), ...);
  }
  Sequential(Sequential&&) = default;
  Sequential& operator=(Sequential&&) = default;

  //! Appends a layer (before build).
  template <class L>
    requires std::derived_from<std::remove_cvref_t<L>, Layer>
  void add(L&& layer) {
    if (built()) throw Error("Sequential::add: the model is already built; add layers before fit/build");
    m_->layers.push_back(std::make_unique<std::remove_cvref_t<L>>(std::forward<L>(layer)));
  }
  void add(Input in) {
    if (!m_->layers.empty() || input_) throw Error("Sequential: Input must come first, and once");
    input_ = std::move(in.shape);
  }
};

}  // namespace strata::nn
