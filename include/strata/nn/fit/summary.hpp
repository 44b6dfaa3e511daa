#pragma once
//! The Keras-like table Sequential::summary() prints: layers, output
//! shapes, parameter counts, and the strategy with what runs where
//! ("(parameter_server, 2 workers, 1 server)", "(pipeline, 2 stages)").
//!   std::printf("%s", model.summary().c_str());

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>

#include <strata/nn/program/model_program.hpp>
#include <strata/strategy/any_strategy.hpp>

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

//! The table of a built model trained by `strategy`, whose `layout` says
//! what runs where ("4 replicas", "2 workers, 1 server", "2 stages").
inline std::string summary_table(const LayerProgram& m, std::string_view strategy, std::string_view layout) {
  std::ostringstream os;
  char b[400];
  const bool graph = !m.chain;  // a functional model: each layer's inputs in a fourth column
  int w = 28;  // the first column: wider where a layer's "name (Kind)" would reach the next one
  for (std::size_t l = 0; l < m.layers.size(); ++l)
    w = std::max(w, static_cast<int>(std::min<std::size_t>(100, m.names[l].size() + m.layers[l]->kind().size() + 4)));
  const std::string rule((graph ? 90 : 65) + (w - 28), '_'), dbl((graph ? 90 : 65) + (w - 28), '=');
  os << "Model: \"" << (graph ? "functional" : "sequential") << "\" (" << strategy << ", " << layout << ")\n"
     << rule << "\n";
  if (graph)
    std::snprintf(b, sizeof b, " %-*s%-26s%-11s%s\n", w, "Layer (type)", "Output Shape", "Param #", "Connected to");
  else
    std::snprintf(b, sizeof b, " %-*s%-26s%s\n", w, "Layer (type)", "Output Shape", "Param #");
  os << b << dbl << "\n";
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    std::size_t n = 0;
    for (const auto& p : m.specs[l]) n += p.shape.elements();
    std::string shape = "(None";
    for (auto d : m.shapes[l].dims()) shape += ", " + std::to_string(d);
    shape += ")";
    std::string from;
    for (std::size_t p : m.inputs[l]) from += (from.empty() ? "" : ", ") + (p == graph_input ? std::string("input") : m.names[p]);
    if (graph)
      std::snprintf(b, sizeof b, " %-*s%-26s%-11s%s\n", w, (m.names[l] + " (" + m.layers[l]->kind() + ")").c_str(),
                    shape.c_str(), with_commas(n).c_str(), from.c_str());
    else
      std::snprintf(b, sizeof b, " %-*s%-26s%s\n", w, (m.names[l] + " (" + m.layers[l]->kind() + ")").c_str(),
                    shape.c_str(), with_commas(n).c_str());
    os << b;
  }
  os << dbl << "\nTotal params: " << with_commas(m.total) << "\nTrainable params: " << with_commas(m.total)
     << "\nNon-trainable params: 0\n" << rule << "\n";
  return os.str();
}
//! The table of a built model trained under `strategy` (its name and layout()).
inline std::string summary_table(const LayerProgram& m, const AnyStrategy& strategy) {
  return summary_table(m, strategy.name(), strategy.layout());
}
//! The table of a built model trained by `strategy` over `replicas` replicas.
inline std::string summary_table(const LayerProgram& m, std::string_view strategy, int replicas) {
  return summary_table(m, strategy, std::to_string(replicas) + (replicas == 1 ? " replica" : " replicas"));
}

}  // namespace strata::nn::detail
