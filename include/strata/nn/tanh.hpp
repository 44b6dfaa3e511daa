#pragma once
//! Tanh layer. Hyperbolic tangent.
//!   strata::nn::Sequential model{strata::nn::Dense{64}, strata::nn::Tanh{}};

#include <strata/nn/activation_layer.hpp>

namespace strata::nn {

class Tanh final : public detail::ActivationLayer<Tanh, Activation::Tanh> {
 public:
  [[nodiscard]] std::string kind() const override { return "Tanh"; }
};

}  // namespace strata::nn
