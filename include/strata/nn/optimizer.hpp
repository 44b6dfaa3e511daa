#pragma once
//! The optimizer interface. An update is elementwise, so it can be applied to
//! any slice of the flat parameter vector: under CentralStorage each replica
//! updates its own slice of the one central copy (and of the one optimizer
//! state); under Mirrored each replica updates its whole copy with its own
//! copy of the state. Optimizer state follows the placement of its variables.
//!   strata::nn::OptimizerState st = opt.make_state(n);
//!   opt.apply(w, g, st, /*offset=*/0, /*step=*/0);

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <strata/nn/learning_rate.hpp>

namespace strata::nn {

//! Per-element state vectors ("slots", e.g. Adam's m and v) of one placement copy.
struct OptimizerState {
  std::vector<std::vector<float>> slots;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual std::size_t slot_count() const noexcept = 0;
  [[nodiscard]] OptimizerState make_state(std::size_t n) const {
    return {std::vector<std::vector<float>>(slot_count(), std::vector<float>(n, 0.f))};
  }
  //! One update of w[i] (i = offset + local index into the state) from g;
  //! `step` counts updates before this one (0 for the first).
  virtual void apply(std::span<float> w, std::span<const float> g, OptimizerState& s, std::size_t offset,
                     std::int64_t step) const = 0;
  [[nodiscard]] virtual std::unique_ptr<Optimizer> clone() const = 0;
};

}  // namespace strata::nn
