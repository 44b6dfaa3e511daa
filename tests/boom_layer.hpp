#pragma once
// A test layer that throws: an identity in forward and backward until the
// training step `after`, then strata::Error("boom in stage") from forward.
// How the pipeline tests make one stage fail (in one process and on ranks).
#include <algorithm>
#include <cstdint>
#include <string>

#include <strata/nn.hpp>

namespace strata_test {

class Boom final : public strata::nn::detail::LayerBase<Boom> {
 public:
  explicit Boom(int after) : after_(after) {}
  std::string kind() const override { return "Boom"; }
  strata::Shape build(const strata::Shape& in) override { return in; }
  void forward(strata::nn::Compute& c, const strata::nn::Act& x, strata::nn::Act& y, const strata::nn::RunInfo& info) override {
    if (info.training && info.step >= static_cast<std::uint64_t>(after_)) throw strata::Error("boom in stage");
    y.resize(c, x.shape());
    if (x.size()) std::copy_n(x.data(), x.size(), y.data());
  }
  void backward(strata::nn::Compute& c, const strata::nn::Act&, const strata::nn::Act&, const strata::nn::Act& dy, strata::nn::Act* dx) override {
    if (!dx) return;
    dx->resize(c, dy.shape());
    if (dy.size()) std::copy_n(dy.data(), dy.size(), dx->data());
  }

 private:
  int after_;
};

}  // namespace strata_test
