#pragma once
//! Numeric-vs-analytic gradient checks for any strata::nn::Layer: backward()
//! must agree with central differences of L = sum(y .* dy) for the input and
//! every parameter. Also checks the interface contract around it: output
//! shape, input left untouched, gradients overwritten (not accumulated), the
//! same parameter gradients with and without dx (and from a second backward
//! of one forward), and clones with caches of their own.
//!   auto r = strata_test::gradcheck(layer, {5, 5, 2}, 3);
//!   CHECK_MESSAGE(r.ok, r.report);

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <strata/nn/layers/layer.hpp>
#include <strata/nn/layers/random.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata_test {

//! What gradcheck draws and how strictly it compares. Designated
//! initializers must follow the declaration order.
//!   strata_test::GradcheckOptions opts{.info = {.training = true, .seed = 5}, .distinct_inputs = true};
//!   auto r = strata_test::gradcheck(layer, {8}, 4, opts);
struct GradcheckOptions {
  //! Passed to every forward: set .training = true for layers that behave
  //! differently while training (Dropout keeps one mask for one RunInfo).
  strata::nn::RunInfo info{};
  std::uint64_t seed = 1;  //!< key of the draws of x, dy and the parameters
  float input_scale = 1.f;  //!< x in [-input_scale, input_scale)
  float param_scale = 1.f;  //!< parameters in [-param_scale, param_scale) (never zeros: biases matter too)
  //! Draw x as a shuffled grid of evenly spaced values that avoids 0, and
  //! shrink the step for x below a quarter of the smallest distance to 0 or to
  //! another value: no perturbation then crosses a kink (ReLU at 0) or swaps
  //! two candidates of a max (MaxPool2D), so the numeric gradient is defined.
  bool distinct_inputs = false;
  double eps = 1e-2;   //!< central-difference step (computed in float: keep it >= 1e-3)
  double rtol = 1e-2;  //!< |numeric - analytic| <= atol + rtol * max(|numeric|, |analytic|)
  double atol = 1e-3;
  std::size_t max_checks = 0;  //!< elements checked per tensor, a seeded sample (0: all)
};

//! The verdict of gradcheck. `report` has one line per tensor with its worst
//! element (index, numeric and analytic values), and a FAIL line per problem.
//!   auto r = strata_test::gradcheck(layer, {4, 4, 1}, 2);
//!   CHECK_MESSAGE(r.ok, r.report);
struct GradcheckResult {
  bool ok = true;
  std::string report;
  double worst_ratio = 0;   //!< largest |numeric - analytic| / tolerance seen (ok needs <= 1)
  std::size_t checked = 0;  //!< elements compared, all tensors together

  explicit operator bool() const noexcept { return ok; }
  friend std::ostream& operator<<(std::ostream& os, const GradcheckResult& r) { return os << r.report; }
};

namespace detail {

inline std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

//! "[1, 0, 2]" for flat index `flat` of `shape`.
inline std::string index_str(const strata::Shape& shape, std::size_t flat) {
  std::vector<std::size_t> idx(shape.rank());
  for (std::size_t d = shape.rank(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

inline strata::Shape batched(std::size_t batch, const strata::Shape& per_sample) {
  std::vector<std::size_t> dims{batch};
  dims.insert(dims.end(), per_sample.dims().begin(), per_sample.dims().end());
  return strata::Shape(std::move(dims));
}

inline void fill_uniform(std::span<float> v, float scale, std::uint64_t key) {
  strata::nn::Rng rng{key};
  for (auto& e : v) e = scale * (2.f * rng.uniform() - 1.f);
}

//! Largest |a - b| / (atol + rtol * max(|a|, |b|)) over two equally long
//! ranges, and where; infinite when either side is not finite.
struct Mismatch {
  double ratio = 0;
  std::size_t at = 0;
};
inline Mismatch compare(std::span<const float> a, std::span<const float> b, double rtol, double atol) {
  Mismatch m;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    const double ratio = std::isfinite(x) && std::isfinite(y)
                             ? std::abs(x - y) / (atol + rtol * std::max(std::abs(x), std::abs(y)))
                             : std::numeric_limits<double>::infinity();
    if (ratio > m.ratio) m = {ratio, i};
  }
  return m;
}

}  // namespace detail

//! Builds `layer` for `per_sample`, binds seeded random parameters, draws x
//! [batch, per_sample...] and dy, and compares backward() against central
//! differences of L = sum(y .* dy) for x and every parameter. `batch` may be 0
//! (then only the overwriting of parameter gradients with zeros is checked).
//!   strata::nn::Conv2D conv(4, 3, {.padding = strata::nn::Padding::Same});
//!   CHECK_MESSAGE(strata_test::gradcheck(conv, {5, 5, 2}, 3).ok, "see report");
inline GradcheckResult gradcheck(strata::nn::Layer& layer, const strata::Shape& per_sample, std::size_t batch,
                                 const GradcheckOptions& options = {}) {
  using strata::Shape;
  using strata::Tensor;
  namespace nn = strata::nn;
  // A value no correct backward leaves behind: it exposes gradients that are
  // accumulated onto, or never written.
  constexpr float sentinel = 1000.f;

  GradcheckResult r;
  const std::string name = layer.kind();
  auto fail = [&](const std::string& line) {
    r.ok = false;
    r.report += "FAIL " + name + ": " + line + "\n";
  };

  const Shape out = layer.build(per_sample);
  const Shape in_shape = detail::batched(batch, per_sample), out_shape = detail::batched(batch, out);

  const std::vector<nn::ParamSpec> specs = layer.params();
  std::vector<std::vector<float>> values(specs.size()), grads(specs.size());
  std::vector<nn::ParamRef> refs;
  for (std::size_t p = 0; p < specs.size(); ++p) {
    values[p].resize(specs[p].shape.elements());
    grads[p].assign(values[p].size(), sentinel);
    detail::fill_uniform(values[p], options.param_scale, nn::detail::mix(options.seed, 1, p));
    refs.push_back({values[p], grads[p]});
  }
  layer.bind(refs);

  Tensor<float> x(in_shape), dy(out_shape);
  double x_step = options.eps;
  if (options.distinct_inputs && x.size() > 0) {
    const double n = static_cast<double>(x.size()), scale = options.input_scale;
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>(scale * (-1.0 + (static_cast<double>(i) + 0.25) * 2.0 / n));
    nn::Rng rng{nn::detail::mix(options.seed, 2)};
    for (std::size_t i = x.size(); i > 1; --i) std::swap(x[i - 1], x[rng.below(i)]);
    // Neighbours are 2 * scale / n apart and the closest to 0 is 0.5 * scale / n away.
    x_step = std::min(x_step, 0.25 * scale / n);
  } else {
    detail::fill_uniform(x.span(), options.input_scale, nn::detail::mix(options.seed, 2));
  }
  detail::fill_uniform(dy.span(), 1.f, nn::detail::mix(options.seed, 3));
  const Tensor<float> x0 = x;

  Tensor<float> y;
  layer.forward(x, y, options.info);
  if (y.shape() != out_shape) {
    fail("forward gave y " + y.shape().str() + " but build() promised " + out_shape.str());
    return r;
  }
  if (!(x == x0)) fail("forward modified its input x");
  const Tensor<float> y0 = y;

  Tensor<float> dx(in_shape, sentinel);
  layer.backward(x, y, dy, &dx);
  if (dx.shape() != in_shape) {
    fail("backward gave dx " + dx.shape().str() + " for x " + in_shape.str());
    return r;
  }
  if (!(x == x0)) fail("backward modified its input x");
  const std::vector<std::vector<float>> grads_with_dx = grads;

  // The first layer of a model gets no dx: its parameter gradients must not
  // depend on asking for one, nor on a backward pass having run before.
  for (auto& g : grads) std::fill(g.begin(), g.end(), sentinel);
  layer.backward(x, y, dy, nullptr);
  for (std::size_t p = 0; p < specs.size(); ++p) {
    const auto m = detail::compare(grads_with_dx[p], grads[p], 1e-5, 1e-6);
    if (m.ratio > 1)
      fail("gradient of \"" + specs[p].name + "\" differs between a backward with dx and a second one without, at " +
           detail::index_str(specs[p].shape, m.at) + ": " + detail::fmt(grads_with_dx[p][m.at]) + " vs " +
           detail::fmt(grads[p][m.at]));
  }
  layer.forward(x, y, options.info);
  if (!(y == y0)) fail("two forward passes of the same x and RunInfo differ");
  const Tensor<float> dx_analytic = dx;
  const std::vector<std::vector<float>>& grads_analytic = grads_with_dx;

  Tensor<float> y_probe;
  auto loss = [&] {
    layer.forward(x, y_probe, options.info);
    double l = 0;
    for (std::size_t i = 0; i < y_probe.size(); ++i) l += static_cast<double>(y_probe[i]) * dy[i];
    return l;
  };
  nn::Rng pick{nn::detail::mix(options.seed, 4)};
  auto check = [&](const std::string& what, const Shape& shape, std::span<float> v, std::span<const float> analytic,
                   double step) {
    std::vector<std::size_t> at(v.size());
    for (std::size_t i = 0; i < at.size(); ++i) at[i] = i;
    if (options.max_checks && at.size() > options.max_checks) {
      for (std::size_t i = 0; i < options.max_checks; ++i) std::swap(at[i], at[i + pick.below(at.size() - i)]);
      at.resize(options.max_checks);
      std::sort(at.begin(), at.end());
    }
    double worst = -1, worst_num = 0, worst_ana = 0;
    std::size_t worst_at = 0;
    for (std::size_t i : at) {
      const float orig = v[i];
      const auto up = static_cast<float>(orig + step), down = static_cast<float>(orig - step);
      v[i] = up;
      const double l_up = loss();
      v[i] = down;
      const double l_down = loss();
      v[i] = orig;
      // Divide by the step float actually took, not the one asked for.
      const double num = (l_up - l_down) / (static_cast<double>(up) - static_cast<double>(down));
      const double ana = analytic[i];
      const double tol = options.atol + options.rtol * std::max(std::abs(num), std::abs(ana));
      const double ratio = std::isfinite(num) && std::isfinite(ana) ? std::abs(num - ana) / tol
                                                                    : std::numeric_limits<double>::infinity();
      if (ratio > worst) worst = ratio, worst_at = i, worst_num = num, worst_ana = ana;
    }
    r.checked += at.size();
    if (at.empty()) return;
    r.worst_ratio = std::max(r.worst_ratio, worst);
    const std::string line = what + " " + shape.str() + ": worst at " + detail::index_str(shape, worst_at) +
                             " (flat " + std::to_string(worst_at) + "): numeric " + detail::fmt(worst_num) +
                             ", analytic " + detail::fmt(worst_ana) + ", |diff| " +
                             detail::fmt(std::abs(worst_num - worst_ana)) + " = " + detail::fmt(worst) +
                             " x tolerance (" + std::to_string(at.size()) + " checked, step " +
                             detail::fmt(step) + ")";
    if (worst <= 1) r.report += "ok   " + name + ": " + line + "\n";
    else fail(line);
  };

  check("dL/dx", in_shape, x.span(), dx_analytic.span(), x_step);
  for (std::size_t p = 0; p < specs.size(); ++p)
    check("dL/d" + specs[p].name, specs[p].shape, values[p], grads_analytic[p], options.eps);

  // A clone must have caches of its own: its forward of another input between
  // this layer's forward and backward must not change this layer's gradients.
  std::unique_ptr<nn::Layer> twin = layer.clone();
  std::vector<std::vector<float>> twin_grads(specs.size());
  std::vector<nn::ParamRef> twin_refs;
  for (std::size_t p = 0; p < specs.size(); ++p) {
    twin_grads[p].assign(values[p].size(), 0.f);
    twin_refs.push_back({values[p], twin_grads[p]});
  }
  twin->bind(twin_refs);
  Tensor<float> other = x, y_twin;
  for (auto& e : other) e = -0.5f * e + 0.25f;
  layer.forward(x, y, options.info);
  twin->forward(other, y_twin, options.info);
  Tensor<float> dx_again(in_shape, sentinel);
  layer.backward(x, y, dy, &dx_again);
  const auto m = detail::compare(dx_again.span(), dx_analytic.span(), 1e-5, 1e-6);
  if (m.ratio > 1)
    fail("dL/dx changed at " + detail::index_str(in_shape, m.at) + " after a clone ran forward on another input (" +
         detail::fmt(dx_analytic[m.at]) + " -> " + detail::fmt(dx_again[m.at]) + "): the clone shares a cache");
  twin->forward(x, y_twin, options.info);
  if (y_twin.shape() != y0.shape() || detail::compare(y_twin.span(), y0.span(), 1e-5, 1e-6).ratio > 1)
    fail("a clone's forward of the same x differs from the original's");
  return r;
}

}  // namespace strata_test
