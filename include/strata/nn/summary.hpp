#pragma once
//! The Keras-like table Sequential::summary() prints: layers, output
//! shapes, parameter counts.
//!   std::printf("%s", model.summary().c_str());

#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>

#include <strata/nn/model_program.hpp>

namespace strata::nn::detail {

inline std::string with_commas(std::size_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

//! The table of a built model trained by `strategy` over `replicas` replicas.
inline std::string summary_table(const LayerProgram& m, std::string_view strategy, int replicas) {
  std::ostringstream os;
  const std::string rule(65, '_'), dbl(65, '=');
  char b[160];
  os << "Model: \"sequential\" (" << strategy << ", " << replicas << (replicas == 1 ? " replica)\n" : " replicas)\n")
     << rule << "\n";
  std::snprintf(b, sizeof b, " %-28s%-26s%s\n", "Layer (type)", "Output Shape", "Param #");
  os << b << dbl << "\n";
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    std::size_t n = 0;
    for (const auto& p : m.specs[l]) n += p.shape.elements();
    std::string shape = "(None";
    for (auto d : m.shapes[l].dims()) shape += ", " + std::to_string(d);
    shape += ")";
    std::snprintf(b, sizeof b, " %-28s%-26s%s\n", (m.names[l] + " (" + m.layers[l]->kind() + ")").c_str(),
                  shape.c_str(), with_commas(n).c_str());
    os << b;
  }
  os << dbl << "\nTotal params: " << with_commas(m.total) << "\nTrainable params: " << with_commas(m.total)
     << "\nNon-trainable params: 0\n" << rule << "\n";
  return os.str();
}

}  // namespace strata::nn::detail
