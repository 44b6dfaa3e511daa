#pragma once
//! GELU layer. Gaussian error linear unit in its exact form, x * Phi(x) =
//! x / 2 * (1 + erf(x / sqrt 2)) (kernels/bodies/activations.hpp).
//!   strata::nn::Sequential model{strata::nn::Dense{64}, strata::nn::GELU{}};

#include <strata/nn/activation_layer.hpp>

namespace strata::nn {

class GELU final : public detail::ActivationLayer<GELU, Activation::GELU> {
 public:
  [[nodiscard]] std::string kind() const override { return "GELU"; }
};

}  // namespace strata::nn
