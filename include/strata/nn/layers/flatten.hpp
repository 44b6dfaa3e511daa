#pragma once
//! Flatten: [batch, d1, d2, ...] -> [batch, d1*d2*...]. No parameters.
//!   strata::nn::Sequential model{strata::nn::Input{{28, 28}}, strata::nn::Flatten{}, strata::nn::Dense{10}};

#include <string>

#include <strata/nn/layers/reshape.hpp>

namespace strata::nn {

class Flatten final : public detail::Relabel<Flatten> {
 public:
  [[nodiscard]] std::string kind() const override { return "Flatten"; }
  Shape build(const Shape& input) override { return set_shapes(input, Shape{input.elements()}); }
};

}  // namespace strata::nn
