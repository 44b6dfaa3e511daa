// CudaCompute's image kernels and optimizer updates are bitwise the host's:
// im2col, col2im (a gather in the host's order), max pooling with ties and
// NaN and its gradient, SGD in its three forms and Adam over several steps.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <strata/cuda/compute.hpp>
#include <strata/kernels/host/compute.hpp>

#include "gpu_util.hpp"

namespace images_optim_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

using namespace gpu_test;
using strata::kernels::Window2D;

namespace {
//! A window like nn/layers/padding.hpp's: valid, or same (out = ceil(in / s), padding split with the extra after).
Window2D window(std::size_t batch, std::size_t h, std::size_t w, std::size_t c, std::size_t k, std::size_t s,
                bool same) {
  Window2D g{batch, h, w, c, k, k, s, s, 0, 0, 0, 0};
  auto axis = [&](std::size_t in, std::size_t& out, std::size_t& pad) {
    if (!same) {
      out = (in - k) / s + 1;
      return;
    }
    out = (in + s - 1) / s;
    const std::size_t span = (out - 1) * s + k;
    pad = (span > in ? span - in : 0) / 2;
  };
  axis(h, g.oh, g.pad_top);
  axis(w, g.ow, g.pad_left);
  return g;
}
}  // namespace

TEST_CASE("im2col, col2im, max_pool and max_pool_backward are bitwise the host's") {
  const Window2D geometries[] = {
      window(3, 9, 7, 4, 3, 1, false),  // convolution, valid
      window(3, 9, 7, 4, 3, 2, true),   // convolution, same, strided: padding on every side
      window(2, 8, 6, 3, 2, 2, false),  // 2x2 pooling
      window(2, 9, 9, 5, 3, 2, true),   // overlapping pooling windows share maxima
      window(1, 5, 5, 1, 5, 1, true),   // windows larger than the stride in both axes
  };
  for (const Window2D& g : geometries) {
    CAPTURE(g.h);
    CAPTURE(g.kh);
    CAPTURE(g.sh);
    CAPTURE(g.pad_top);
    const std::size_t in = g.batch * g.h * g.w * g.c, out = g.batch * g.oh * g.ow * g.c;
    const std::size_t cols = g.batch * g.oh * g.ow * g.kh * g.kw * g.c;
    auto x = random_floats(in, 19);
    for (float& v : x) v = std::floor(v * 2.f);  // few distinct values: ties in most windows
    x[3] = std::numeric_limits<float>::quiet_NaN();
    Dev<float> dx(gpu(), x);

    std::vector<float> col(cols);
    host().im2col(g, x.data(), col.data());
    Dev<float> dcol(gpu(), cols);
    gpu().im2col(g, dx, dcol);
    check_bitwise(dcol.read(), col, "im2col");

    const auto dcol_values = random_floats(cols, 20);
    std::vector<float> back(in);
    host().col2im(g, dcol_values.data(), back.data());
    dcol.write(dcol_values);
    Dev<float> dback(gpu(), in, 7.f);
    gpu().col2im(g, dcol, dback);
    check_bitwise(dback.read(), back, "col2im");

    std::vector<float> y(out);
    std::vector<std::uint32_t> arg(out);
    host().max_pool(g, x.data(), y.data(), arg.data());
    Dev<float> dy(gpu(), out);
    Dev<std::uint32_t> darg(gpu(), out);
    gpu().max_pool(g, dx, dy, darg);
    check_bitwise(dy.read(), y, "max_pool");
    check_bitwise(darg.read(), arg, "max_pool argmax");

    const auto up = random_floats(out, 21);
    std::vector<float> grad(in);
    host().max_pool_backward(g, up.data(), arg.data(), grad.data());
    Dev<float> dup(gpu(), up), dgrad(gpu(), in, 7.f);
    gpu().max_pool_backward(g, dup, darg, dgrad);
    check_bitwise(dgrad.read(), grad, "max_pool_backward");
  }
}

TEST_CASE("SGD (plain, momentum, Nesterov) and Adam updates are bitwise the host's over several steps") {
  const std::size_t n = 10007;
  const auto w0 = random_floats(n, 22), v0 = random_floats(n, 23, -0.1f, 0.1f);
  for (const strata::kernels::SgdStep s : {strata::kernels::SgdStep{0.05f, 0.f, false},
                                           strata::kernels::SgdStep{0.05f, 0.9f, false},
                                           strata::kernels::SgdStep{0.05f, 0.9f, true}}) {
    CAPTURE(s.momentum);
    CAPTURE(s.nesterov);
    auto w = w0, v = v0;
    Dev<float> dw(gpu(), w0), dv(gpu(), v0);
    for (unsigned step = 0; step < 4; ++step) {
      const auto g = random_floats(n, 30 + step);
      host().sgd(w.data(), g.data(), v.data(), n, s);
      Dev<float> dg(gpu(), g);
      gpu().sgd(dw, dg, dv, n, s);
    }
    check_bitwise(dw.read(), w, "sgd weights");
    check_bitwise(dv.read(), v, "sgd velocity");
  }
  auto w = w0;
  std::vector<float> m(n), v(n);
  Dev<float> dw(gpu(), w0), dm(gpu(), n), dv(gpu(), n);
  for (unsigned step = 0; step < 5; ++step) {
    const strata::kernels::AdamStep s{0.001f * std::sqrt(1.f - std::pow(0.999f, step + 1.f)) /
                                      (1.f - std::pow(0.9f, step + 1.f))};
    const auto g = random_floats(n, 40 + step);
    host().adam(w.data(), g.data(), m.data(), v.data(), n, s);
    Dev<float> dg(gpu(), g);
    gpu().adam(dw, dg, dm, dv, n, s);
  }
  check_bitwise(dm.read(), m, "adam m");
  check_bitwise(dv.read(), v, "adam v");
  check_bitwise(dw.read(), w, "adam weights");
}

}  // namespace images_optim_gpu_test
