#pragma once
//! Softmax layer. Softmax over the last axis (numerically stable: the row maximum is subtracted).
//!   strata::nn::Sequential model{strata::nn::Dense{10}, strata::nn::Softmax{}};

#include <strata/nn/activation_layer.hpp>

namespace strata::nn {

class Softmax final : public detail::ActivationLayer<Softmax, Activation::Softmax> {
 public:
  [[nodiscard]] std::string kind() const override { return "Softmax"; }
};

}  // namespace strata::nn
