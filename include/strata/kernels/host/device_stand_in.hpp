#pragma once
//! DeviceStandIn: a GPU's stand-in on a machine without one. It computes
//! on the host, in host memory, but reports itself as a device
//! (Where::StandIn, "stand-in GPU i"), so every branch the executors and
//! layers take for a GPU runs where CI runs; where a GPU runs an element
//! body of kernels/bodies/, it runs that body over the kernel's index space
//! (the CUDA launcher's for_each or grid), not the host's loops or SSE.
//! With DenseOrder::Device it adds a Dense bias to the product through
//! bias_activate's body as a GPU does (within rounding of the host's, not
//! bitwise) and sums as a GPU's grid does (host/grid_loops.hpp): the sparse
//! cross-entropy's rows by lanes, column sums by chunks and lanes, the
//! accuracy count by blocks, a label that names no class counted as invalid
//! (the host throws). The non-finite count is a GPU's (exact) in both orders.
//!   strata::kernels::DeviceStandIn gpu{0};                       // bitwise the host's results
//!   strata::kernels::DeviceStandIn gpu{0, strata::kernels::DenseOrder::Device};  // a GPU's Dense order

#include <cstddef>
#include <cstdint>
#include <string>

#include <strata/kernels/bodies/activations.hpp>
#include <strata/kernels/bodies/maps.hpp>
#include <strata/kernels/bodies/optim.hpp>
#include <strata/kernels/bodies/windows.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/kernels/host/grid_loops.hpp>
#include <strata/kernels/step_state.hpp>

namespace strata::kernels {

//! Where a Dense layer's bias is added, the host's way (the product added
//! to the bias) or a device's (the bias added to the product), and, with
//! it, whose order the loss rows and column sums are summed in.
enum class DenseOrder { Host, Device };

class DeviceStandIn final : public HostCompute {
 public:
  explicit DeviceStandIn(int index = 0, DenseOrder order = DenseOrder::Host) : index_(index), order_(order) {}

  [[nodiscard]] Where where() const noexcept override { return Where::StandIn; }
  [[nodiscard]] std::string name() const override { return "stand-in GPU " + std::to_string(index_) + " (host memory)"; }

  void dense_forward(Activation a, const float* x, const float* w, const float* bias, float* y, std::size_t rows,
                     std::size_t in, std::size_t out) override {
    if (order_ == DenseOrder::Host) return HostCompute::dense_forward(a, x, w, bias, y, rows, in, out);
    Compute::dense_forward(a, x, w, bias, y, rows, in, out);  // the product, then bias_activate (a GPU's order)
  }
  //! Element-wise activations through their body (the bias by bodies::add), as a GPU's ActivateAt; softmax rows as the host's.
  void bias_activate(Activation a, const float* x, const float* bias, float* y, std::size_t rows,
                     std::size_t cols) override {
    if (a == Activation::Softmax || (a == Activation::Linear && !bias))
      return HostCompute::bias_activate(a, x, bias, y, rows, cols);
    const std::size_t n = rows * cols;
    bodies::visit_elementwise(a, [&](auto act) {
      for (std::size_t i = 0; i < n; ++i) y[i] = act(bias ? bodies::add(x[i], bias[i % cols]) : x[i]);
    });
  }
  using Compute::activation_backward;
  void activation_backward(Activation a, const float* z, const float* y, const float* dy, float* dz,
                           std::size_t rows, std::size_t cols) override {
    if (a == Activation::Softmax || a == Activation::Linear)
      return HostCompute::activation_backward(a, z, y, dy, dz, rows, cols);
    if (activation_needs_input(a) && !z)
      throw Error(std::string("activation_backward: the gradient of ") + std::string(activation_name(a)) +
                  " needs the activation's input z, and none was given");
    const std::size_t n = rows * cols;
    bodies::visit_elementwise(a, [&](auto act) {
      for (std::size_t i = 0; i < n; ++i) dz[i] = act.grad(z ? z[i] : 0.f, y[i], dy[i]);
    });
  }

  void im2col(const Window2D& g, const float* x, float* col) override {
    const std::size_t total = g.batch * g.oh * g.ow * g.kh * g.kw * g.c;
    for (std::size_t e = 0; e < total; ++e) col[e] = bodies::im2col_element(g, x, e);
  }
  void col2im(const Window2D& g, const float* col, float* dx) override {
    const std::size_t total = g.batch * g.h * g.w * g.c;
    if (g.oh == 0 || g.ow == 0) return fill(dx, 0.f, total);
    for (std::size_t e = 0; e < total; ++e) dx[e] = bodies::col2im_element(g, col, e);
  }
  void max_pool(const Window2D& g, const float* x, float* y, std::uint32_t* argmax) override {
    const std::size_t total = g.batch * g.oh * g.ow * g.c;
    for (std::size_t e = 0; e < total; ++e) y[e] = bodies::max_pool_element(g, x, e, argmax + e);
  }
  void max_pool_backward(const Window2D& g, const float* dy, const std::uint32_t* argmax, float* dx) override {
    const std::size_t total = g.batch * g.h * g.w * g.c;
    if (g.oh == 0 || g.ow == 0) return fill(dx, 0.f, total);
    for (std::size_t e = 0; e < total; ++e) dx[e] = bodies::max_pool_backward_element(g, dy, argmax, e);
  }

  //! In a GPU's order (DenseOrder::Device), a GPU's grid (host/grid_loops.hpp): a loss row by its lanes, the
  //! column sums by chunks and lanes, a label that names no class counted; else the host's loops.
  void sparse_crossentropy(const float* pred, const float* labels, float* d, float scale, std::size_t rows,
                           std::size_t classes, bool from_logits, double* acc, double* invalid) override {
    if (order_ == DenseOrder::Host)
      return HostCompute::sparse_crossentropy(pred, labels, d, scale, rows, classes, from_logits, acc, invalid);
    host::grid_sparse_crossentropy(pred, labels, d, scale, rows, classes, from_logits, acc, invalid);
  }
  void sparse_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes, double* acc,
                   double* invalid) override {
    if (order_ == DenseOrder::Host) return HostCompute::sparse_hits(pred, labels, rows, classes, acc, invalid);
    host::grid_sparse_hits(pred, labels, rows, classes, acc, invalid);
  }
  void column_sums(const float* x, float* out, std::size_t rows, std::size_t cols) override {
    if (order_ == DenseOrder::Host) return HostCompute::column_sums(x, out, rows, cols);
    host::grid_column_sums(x, out, rows, cols);
  }
  //! A GPU's grid in either order: the count is exact, the host's.
  void count_nonfinite(const float* x, std::size_t n, double* acc) override { host::grid_count_nonfinite(x, n, acc); }

  void sgd(float* w, const float* g, float* v, std::size_t n, const SgdStep& s) override { sgd_body(w, g, v, n, s); }
  void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) override {
    const bodies::AdamElement body{s};
    for (std::size_t i = 0; i < n; ++i) body(w[i], g[i], m[i], v[i]);
  }
  void adamw(float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& s) override {
    const bodies::AdamWElement body{s};
    for (std::size_t i = 0; i < n; ++i) body(w[i], g[i], m[i], v[i]);
  }
  // sgd_at, adam_at, adamw_at: HostCompute's, which take the rate at the step and call these three.

 private:
  static void sgd_body(float* w, const float* g, float* v, std::size_t n, const SgdStep& s) {
    bodies::visit_sgd(s, [&](auto body) {
      float unused = 0.f;  // plain SGD keeps no velocity (`v` may be null)
      for (std::size_t i = 0; i < n; ++i) body(w[i], g[i], s.momentum == 0.f ? unused : v[i]);
    });
  }
  int index_;
  DenseOrder order_;
};

}  // namespace strata::kernels
