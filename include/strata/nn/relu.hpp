#pragma once
//! ReLU layer. Rectified linear unit: max(x, 0).
//!   strata::nn::Sequential model{strata::nn::Dense{64}, strata::nn::ReLU{}};

#include <strata/nn/activation_layer.hpp>

namespace strata::nn {

class ReLU final : public detail::ActivationLayer<ReLU, Activation::ReLU> {
 public:
  [[nodiscard]] std::string kind() const override { return "ReLU"; }
};

}  // namespace strata::nn
