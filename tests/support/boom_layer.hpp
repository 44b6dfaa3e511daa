#pragma once
// A test layer that throws: an identity in forward and backward until the
// training step `after`, then strata::Error("boom in stage") from forward.
// How the pipeline tests make one stage fail (in one process and on ranks).
#include <cstdint>
#include <string>

#include <strata/nn.hpp>

#include "support/identity_layer.hpp"

namespace strata_test {

class Boom final : public Identity<Boom> {
 public:
  explicit Boom(int after) : after_(after) {}
  std::string kind() const override { return "Boom"; }
  void on_forward(const strata::nn::RunInfo& info) {
    if (info.training && info.step >= static_cast<std::uint64_t>(after_)) throw strata::Error("boom in stage");
  }

 private:
  int after_;
};

}  // namespace strata_test
