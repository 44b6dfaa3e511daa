#pragma once
// The base of the tests' probe layers: the identity in forward and backward
// (copies through the layer's compute), with a look inside each: Derived's
// on_forward(info) runs before the forward's copy, on_backward() before the
// backward's. A probe fails, stalls or records there.
//   class Naps final : public strata_test::Identity<Naps> {
//     std::string kind() const override { return "Naps"; }
//     void on_forward(const strata::nn::RunInfo& info) { if (info.replica == 1) sleep(); }
//   };
#include <strata/nn.hpp>

namespace strata_test {

template <class Derived>
class Identity : public strata::nn::detail::LayerBase<Derived> {
 public:
  strata::Shape build(const strata::Shape& input) override { return input; }
  void forward(strata::nn::Compute& c, const strata::nn::Act& x, strata::nn::Act& y,
               const strata::nn::RunInfo& info) override {
    static_cast<Derived&>(*this).on_forward(info);
    y.resize(c, x.shape());
    if (x.size()) c.copy(y.data(), x.data(), x.size() * sizeof(float));
  }
  void backward(strata::nn::Compute& c, const strata::nn::Act&, const strata::nn::Act&, const strata::nn::Act& dy,
                strata::nn::Act* dx) override {
    static_cast<Derived&>(*this).on_backward();
    if (!dx) return;
    dx->resize(c, dy.shape());
    if (dy.size()) c.copy(dx->data(), dy.data(), dy.size() * sizeof(float));
  }
  void on_forward(const strata::nn::RunInfo& /*info*/) {}
  void on_backward() {}
};

}  // namespace strata_test
