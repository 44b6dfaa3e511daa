// CudaCompute against the host compute (kernels::host_compute()): products,
// maps, reductions, losses and metrics. Transcendental functions, sums and
// products agree within FP32 tolerance; the elementwise ops whose host loop
// has one rounding per operation (axpy, multiply, dropout) are bitwise equal.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <vector>

#include <strata/core/random.hpp>
#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/cuda.hpp>  // registers the GPU with the strategies (OneDeviceStrategy{gpu(0)} below)
#include <strata/cuda/compute.hpp>
#include <strata/kernels/host/compute.hpp>

#include "gpu_util.hpp"
#include "skip.hpp"

namespace compute_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

using strata::kernels::Activation;
using namespace gpu_test;

TEST_CASE("CudaCompute names its device and refuses devices that do not exist") {
  CHECK(gpu().where() == strata::kernels::Where::Cuda);
  CHECK(gpu().name().rfind("cuda:0 (", 0) == 0);
  CHECK(strata::cuda::make_compute(0)->where() == strata::kernels::Where::Cuda);
  const int n = strata::cuda::device_count();
  CHECK_THROWS_WITH_AS(strata::cuda::make_compute(n), doctest::Contains("no CUDA device"), strata::CudaError);
  CHECK_THROWS_AS(strata::cuda::CudaCompute(-1), strata::CudaError);
}

TEST_CASE("gemm: every transpose, leading dimensions, k = 0 and empty products") {
  const std::size_t m = 37, n = 29, k = 53;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta);
      CAPTURE(tb);
      const std::size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      const auto a = random_floats((ta ? k : m) * lda, 1), b = random_floats((tb ? n : k) * ldb, 2);
      const auto c0 = random_floats(m * ldc, 3);
      auto want = c0;
      host().gemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, 0.5f, want.data(), ldc);
      Dev<float> da(gpu(), a), db(gpu(), b), dc(gpu(), c0);
      gpu().gemm(ta, tb, m, n, k, 0.75f, da, lda, db, ldb, 0.5f, dc, ldc);
      check_close(dc.read(), want, 1e-5, 1e-4, "gemm");
    }
  // k = 0: C = beta C, and beta = 0 clears C even where it held NaN
  std::vector<float> c(6, 2.f);
  c[1] = std::numeric_limits<float>::quiet_NaN();
  Dev<float> dc(gpu(), c);
  gpu().gemm(false, false, 2, 3, 0, 1.f, nullptr, 1, nullptr, 3, 0.f, dc, 3);
  check_bitwise(dc.read(), std::vector<float>(6, 0.f), "k = 0, beta = 0");
  dc.write(std::vector<float>(6, 2.f));
  gpu().gemm(false, false, 2, 3, 0, 1.f, nullptr, 1, nullptr, 3, 0.5f, dc, 3);
  check_bitwise(dc.read(), std::vector<float>(6, 1.f), "k = 0, beta = 0.5");
  gpu().gemm(false, false, 0, 3, 4, 1.f, nullptr, 4, nullptr, 3, 0.f, dc, 3);  // m = 0: nothing to touch
  check_bitwise(dc.read(), std::vector<float>(6, 1.f), "m = 0");
}

TEST_CASE("gemm in TF32 and BF16 math modes stays close to FP32") {
  const std::size_t m = 64, n = 48, k = 256;
  const auto a = random_floats(m * k, 4), b = random_floats(k * n, 5);
  std::vector<float> want(m * n);
  host().gemm(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, want.data(), n);
  for (auto mode : {strata::cuda::MathMode::TF32, strata::cuda::MathMode::BF16}) {
    strata::cuda::CudaCompute c{0, mode};
    CHECK(c.math_mode() == mode);
    Dev<float> da(c, a), db(c, b), dc(c, m * n);
    c.gemm(false, false, m, n, k, 1.f, da, k, db, n, 0.f, dc, n);
    // |sum| of 256 products of [-2, 2] values is ~ 20; 8-bit (BF16) inputs: ~1% of sqrt(k) * 4
    check_close(dc.read(), want, 2e-2, mode == strata::cuda::MathMode::TF32 ? 0.1 : 0.6, "reduced-precision gemm");
  }
}

TEST_CASE("bias_activate and activation_backward match the host for every activation") {
  const std::size_t rows = 13, cols = 37;  // softmax rows wider than a warp
  const auto x = random_floats(rows * cols, 6, -4.f, 4.f), bias = random_floats(cols, 7);
  const auto dy = random_floats(rows * cols, 8);
  for (Activation a : {Activation::Linear, Activation::ReLU, Activation::Sigmoid, Activation::Tanh,
                       Activation::Softmax}) {
    CAPTURE(strata::kernels::activation_name(a));
    for (bool with_bias : {false, true}) {
      std::vector<float> y(rows * cols);
      host().bias_activate(a, x.data(), with_bias ? bias.data() : nullptr, y.data(), rows, cols);
      Dev<float> dx(gpu(), x), db(gpu(), bias), d_y(gpu(), rows * cols);
      gpu().bias_activate(a, dx, with_bias ? db.get() : nullptr, d_y, rows, cols);
      check_close(d_y.read(), y, 1e-5, 1e-6, "bias_activate");
      gpu().bias_activate(a, dx, with_bias ? db.get() : nullptr, dx, rows, cols);  // in place
      check_close(dx.read(), y, 1e-5, 1e-6, "bias_activate in place");

      std::vector<float> dz(rows * cols);
      host().activation_backward(a, y.data(), dy.data(), dz.data(), rows, cols);
      Dev<float> dyd(gpu(), dy), dzd(gpu(), rows * cols);
      gpu().activation_backward(a, dx, dyd, dzd, rows, cols);
      check_close(dzd.read(), dz, 1e-5, 1e-6, "activation_backward");
      gpu().activation_backward(a, dx, dyd, dyd, rows, cols);  // dz = dy
      check_close(dyd.read(), dz, 1e-5, 1e-6, "activation_backward in place");
    }
  }
}

// Issue 22: the ops added through the shared kernel bodies (kernels/bodies/)
// run on the GPU as on the host: GELU (erfc: within libm's ulps), LayerNorm
// (one row body for a warp and the host's 32 simulated lanes: bitwise).
TEST_CASE("GELU and LayerNorm, forward and backward, match the host (LayerNorm bitwise)") {
  const std::size_t rows = 13, cols = 37;  // rows wider than a warp
  const auto x = random_floats(rows * cols, 16, -4.f, 4.f), bias = random_floats(cols, 17);
  const auto dy = random_floats(rows * cols, 18);
  std::vector<float> z(rows * cols), y(rows * cols), dz(rows * cols);
  for (std::size_t i = 0; i < z.size(); ++i) z[i] = x[i] + bias[i % cols];
  host().bias_activate(Activation::GELU, x.data(), bias.data(), y.data(), rows, cols);
  host().activation_backward(Activation::GELU, z.data(), y.data(), dy.data(), dz.data(), rows, cols);
  Dev<float> dx(gpu(), x), db(gpu(), bias), dzin(gpu(), z), d_y(gpu(), rows * cols), dyd(gpu(), dy),
      dzd(gpu(), rows * cols);
  gpu().bias_activate(Activation::GELU, dx, db, d_y, rows, cols);
  check_close(d_y.read(), y, 1e-5, 1e-6, "gelu");
  gpu().activation_backward(Activation::GELU, dzin, d_y, dyd, dzd, rows, cols);
  check_close(dzd.read(), dz, 1e-5, 1e-6, "gelu backward");

  const auto gamma = random_floats(cols, 19, -0.5f, 0.5f), beta = random_floats(cols, 20);
  std::vector<float> ly(rows * cols), xhat(rows * cols), rstd(rows), ldx(rows * cols), dgamma(rows * cols);
  host().layer_norm(x.data(), gamma.data(), beta.data(), ly.data(), xhat.data(), rstd.data(), rows, cols, 1e-5f);
  host().layer_norm_backward(dy.data(), xhat.data(), rstd.data(), gamma.data(), ldx.data(), dgamma.data(), rows, cols);
  Dev<float> dg(gpu(), gamma), dbeta(gpu(), beta), dly(gpu(), rows * cols), dxhat(gpu(), rows * cols),
      drstd(gpu(), rows), dldx(gpu(), rows * cols), ddgamma(gpu(), rows * cols);
  gpu().layer_norm(dx, dg, dbeta, dly, dxhat, drstd, rows, cols, 1e-5f);
  CHECK(dly.read() == ly);
  CHECK(dxhat.read() == xhat);
  CHECK(drstd.read() == rstd);
  gpu().layer_norm_backward(dyd, dxhat, drstd, dg, dldx, ddgamma, rows, cols);
  CHECK(dldx.read() == ldx);
  CHECK(ddgamma.read() == dgamma);
}

TEST_CASE("column_sums: short and tall inputs, deterministic, zeros for no rows") {
  for (std::size_t rows : {std::size_t{1}, std::size_t{1000}, std::size_t{70001}}) {
    for (std::size_t cols : {std::size_t{10}, std::size_t{33}}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const auto x = random_floats(rows * cols, static_cast<unsigned>(rows + cols));
      std::vector<double> exact(cols), mass(cols);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < cols; ++j) exact[j] += x[r * cols + j], mass[j] += std::abs(x[r * cols + j]);
      std::vector<float> want(cols);
      host().column_sums(x.data(), want.data(), rows, cols);
      Dev<float> dx(gpu(), x), out(gpu(), cols, -1.f);
      gpu().column_sums(dx, out, rows, cols);
      const auto got = out.read();
      for (std::size_t j = 0; j < cols; ++j) {
        CHECK(close(got[j], exact[j], 0, 1e-6 * mass[j] + 1e-6));
        CHECK(close(got[j], want[j], 0, 1e-5 * mass[j] + 1e-6));
      }
      gpu().column_sums(dx, out, rows, cols);
      check_bitwise(out.read(), got, "column_sums run twice");
    }
  }
  Dev<float> out(gpu(), 5, 3.f);
  gpu().column_sums(nullptr, out, 0, 5);
  check_bitwise(out.read(), std::vector<float>(5, 0.f), "column_sums of no rows");
}

TEST_CASE("fill, copy, axpy and multiply are bitwise the host's") {
  const std::size_t n = 100003;
  const auto x = random_floats(n, 9), y0 = random_floats(n, 10);
  auto y = y0;
  host().axpy(-0.37f, x.data(), y.data(), n);
  Dev<float> dx(gpu(), x), dy(gpu(), y0), dz(gpu(), n);
  gpu().axpy(-0.37f, dx, dy, n);
  check_bitwise(dy.read(), y, "axpy");
  std::vector<float> z(n);
  host().multiply(x.data(), y0.data(), z.data(), n);
  dy.write(y0);
  gpu().multiply(dx, dy, dz, n);
  check_bitwise(dz.read(), z, "multiply");
  gpu().fill(dz, 1.5f, n);
  check_bitwise(dz.read(), std::vector<float>(n, 1.5f), "fill");
  gpu().copy(dz, dx, n * sizeof(float));
  check_bitwise(dz.read(), x, "copy");
  gpu().fill(dz, 0.f, 0);  // n = 0 launches nothing
}

// Gradient compression's rounding (Compute::round_to_wire: bodies::RoundWithResidual on both sides) and
// expansion: the host's bits for both formats, with ties, overflows (fp16), NaN, infinity and subnormals in
// the input, the residual updated in place and out of place.
TEST_CASE("round_to_wire and expand_wire are bitwise the host's, residual in place or not") {
  const std::size_t n = 100003;
  auto g = random_floats(n, 21, -3.f, 3.f);
  const auto res = random_floats(n, 22, -1e-3f, 1e-3f);
  const float edge[] = {1.f + 1.f / 256, 1.f + 3.f / 256, 65520.f, -1e5f, 3e38f, 1e-40f, 6e-8f,
                        std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (std::size_t i = 0; i < std::size(edge); ++i) g[i * 997] = edge[i];
  for (strata::WireFormat f : {strata::WireFormat::bf16, strata::WireFormat::fp16}) {
    CAPTURE(static_cast<int>(f));
    std::vector<std::uint16_t> hw(n), back_bits;
    std::vector<float> hnext(n), hback(n);
    host().round_to_wire(f, g.data(), res.data(), hnext.data(), hw.data(), n);
    host().expand_wire(f, hw.data(), hback.data(), n);
    Dev<float> dg(gpu(), g), dres(gpu(), res), dnext(gpu(), n), dback(gpu(), n);
    Dev<std::uint16_t> dw(gpu(), n);
    gpu().round_to_wire(f, dg, dres, dnext, dw.get(), n);
    check_bitwise(dw.read(), hw, "round_to_wire's 16-bit values");
    check_bitwise(dnext.read(), hnext, "round_to_wire's residual");
    gpu().expand_wire(f, dw.get(), dback, n);
    check_bitwise(dback.read(), hback, "expand_wire");
    gpu().round_to_wire(f, dg, dres, dres, dw.get(), n);  // the residual updated in place
    check_bitwise(dres.read(), hnext, "round_to_wire's residual, in place");
    check_bitwise(dw.read(), hw, "round_to_wire's 16-bit values, residual in place");
    gpu().round_to_wire(f, dg, dres, dnext, dw.get(), 0);  // n = 0 launches nothing
  }
}

TEST_CASE("dropout draws the host Rng's masks bit for bit") {
  const std::size_t n = 100003;
  const std::uint64_t key = strata::detail::mix(42, 1, 7);
  const float rate = 0.3f;
  const auto x = random_floats(n, 11);
  std::vector<float> y(n), mask(n);
  host().dropout(x.data(), y.data(), mask.data(), n, key, rate);
  strata::Rng rng{key};  // the formula itself, not only the host's loop
  std::vector<float> formula(n);
  for (float& m : formula) m = rng.uniform() < rate ? 0.f : 1.f / (1.f - rate);
  check_bitwise(mask, formula, "the host's mask against the Rng formula");
  const auto dropped = static_cast<double>(std::count(mask.begin(), mask.end(), 0.f));
  CHECK(close(dropped / n, rate, 0, 0.01));
  Dev<float> dx(gpu(), x), dy(gpu(), n), dm(gpu(), n);
  gpu().dropout(dx, dy, dm, n, key, rate);
  check_bitwise(dm.read(), mask, "dropout mask");
  check_bitwise(dy.read(), y, "dropout output");
}

TEST_CASE("every activation propagates NaN on the GPU as on the host") {
  const std::size_t rows = 3, cols = 37;
  auto x = random_floats(rows * cols, 31, -4.f, 4.f);
  x[5] = std::numeric_limits<float>::quiet_NaN();   // row 0
  x[cols + 36] = std::numeric_limits<float>::quiet_NaN();  // row 1, the last column
  for (Activation a : {Activation::ReLU, Activation::Sigmoid, Activation::Tanh, Activation::Softmax}) {
    CAPTURE(strata::kernels::activation_name(a));
    std::vector<float> want(rows * cols);
    host().bias_activate(a, x.data(), nullptr, want.data(), rows, cols);
    Dev<float> dx(gpu(), x), dy(gpu(), rows * cols);
    gpu().bias_activate(a, dx, nullptr, dy, rows, cols);
    const auto got = dy.read();
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(std::isnan(got[i]) == std::isnan(want[i]));
    }
    CHECK(std::isnan(got[5]));
    CHECK(std::isnan(got[cols + 36]));
    CHECK_FALSE(std::isnan(got[2 * cols]));  // row 2 has no NaN
  }
}

TEST_CASE("fit on a GPU skips a step whose gradient is not finite, as on the host") {
  namespace nn = strata::nn;
  // 64 rows of 6 features in batches of 16; row 37 (batch 2) holds a NaN
  strata::Tensor<float> x{{64, 6}}, xs{{48, 6}};
  strata::Tensor<std::int32_t> y{{64}}, ys{{48}};
  const auto r = random_floats(64 * 6, 41, -1.f, 1.f);
  for (std::size_t i = 0; i < 64; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = r[i * 6 + j];
    y[i] = static_cast<std::int32_t>(i % 3);
  }
  for (std::size_t i = 0, o = 0; i < 64; ++i)
    if (i / 16 != 2) {
      for (std::size_t j = 0; j < 6; ++j) xs[o * 6 + j] = x[i * 6 + j];
      ys[o++] = y[i];
    }
  x[37 * 6 + 1] = std::numeric_limits<float>::quiet_NaN();
  auto run = [](const strata::Tensor<float>& fx, const strata::Tensor<std::int32_t>& fy, nn::History& h) {
    strata::OneDeviceStrategy s{strata::gpu(0)};
    auto model = s.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::ReLU}}, nn::Dense{3}};
    });
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                  {.seed = 7});
    h = model.fit(s.distribute(strata::data::from_tensor_slices(fx, fy).batch(16)),
                  {.epochs = 2, .verbose = nn::Verbosity::Silent});
    std::vector<float> w;
    for (const auto& t : model.get_weights()) w.insert(w.end(), t.value.begin(), t.value.end());
    CHECK(model.iterations() == 6);
    return w;
  };
  nn::History h, href;
  const auto got = run(x, y, h), want = run(xs, ys, href);
  CHECK(h.at("skipped_steps") == std::vector<double>{1.0, 1.0});
  for (float v : got) REQUIRE(std::isfinite(v));
  check_close(got, want, 1e-6, 1e-7, "weights as if the NaN batch had not been there");
}

TEST_CASE("a pass on gpu(1) gives the caller's thread its current device back (two GPUs)") {
  STRATA_GPU_SKIP_UNLESS(strata::cuda::device_count() >= 2,
                         "a pass on gpu(1) restoring the caller's device needs 2 GPUs; this machine has " +
                             std::to_string(strata::cuda::device_count()));
  namespace nn = strata::nn;
  strata::Tensor<float> x{{32, 6}};
  strata::Tensor<std::int32_t> y{{32}};
  for (std::size_t i = 0; i < 32; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = static_cast<float>((i + j) % 5) - 2.f;
    y[i] = static_cast<std::int32_t>(i % 3);
  }
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  strata::OneDeviceStrategy s{strata::gpu(1)};
  auto model = s.scope([] { return nn::Sequential{nn::Input{{6}}, nn::Dense{3}}; });
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 1});
  model.fit(s.distribute(strata::data::from_tensor_slices(x, y).batch(8)), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
  CHECK(model.iterations() == 4);
}

}  // namespace compute_gpu_test
