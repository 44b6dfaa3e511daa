#pragma once
//! Sigmoid layer. Logistic sigmoid: 1 / (1 + exp(-x)).
//!   strata::nn::Sequential model{strata::nn::Dense{64}, strata::nn::Sigmoid{}};

#include <strata/nn/activation_layer.hpp>

namespace strata::nn {

class Sigmoid final : public detail::ActivationLayer<Sigmoid, Activation::Sigmoid> {
 public:
  [[nodiscard]] std::string kind() const override { return "Sigmoid"; }
};

}  // namespace strata::nn
