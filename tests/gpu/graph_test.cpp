// CUDA graphs and the memory calls of CudaCompute: a captured step replays
// bitwise like the same calls run eagerly; calls that wait on the host
// refuse to be captured; upload lets the caller reuse its source at once;
// big copies go through the staging buffers in chunks; allocation failures
// are typed.

#include <doctest/doctest.h>

#include <vector>

#include <strata/cuda/compute.hpp>
#include <strata/cuda/stream.hpp>

#include "gpu_util.hpp"

namespace graph_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

using namespace gpu_test;
using strata::kernels::Activation;

namespace {
//! One small training-like step: y = relu(x w + b), db = column sums of y, an Adam update of w by y's sums.
void step(strata::cuda::CudaCompute& c, const float* x, float* w, const float* b, float* y, float* db, float* m,
          float* v, std::size_t rows, std::size_t in, std::size_t out) {
  c.gemm(false, false, rows, out, in, 1.f, x, in, w, out, 0.f, y, out);
  c.bias_activate(Activation::ReLU, y, b, y, rows, out);
  c.column_sums(y, db, rows, out);
  c.adam(w, y, m, v, in * out < rows * out ? in * out : rows * out, {0.01f});
}
}  // namespace

TEST_CASE("a captured graph replays bitwise like eager execution") {
  strata::cuda::CudaCompute c{0};
  const std::size_t rows = 128, in = 96, out = 64;
  const auto x = random_floats(rows * in, 1), w0 = random_floats(in * out, 2), b = random_floats(out, 3);
  Dev<float> dx(c, x), dw(c, w0), dbias(c, b), dy(c, rows * out), ddb(c, out), dm(c, in * out), dv(c, in * out);
  auto reset = [&] {
    dw.write(w0);
    dm.write(std::vector<float>(in * out));
    dv.write(std::vector<float>(in * out));
  };
  reset();
  for (int i = 0; i < 3; ++i) step(c, dx, dw, dbias, dy, ddb, dm, dv, rows, in, out);
  const auto eager_w = dw.read(), eager_y = dy.read(), eager_db = ddb.read();

  reset();
  c.begin_capture();
  CHECK(c.capturing());
  step(c, dx, dw, dbias, dy, ddb, dm, dv, rows, in, out);
  strata::cuda::Graph g = c.end_capture();
  CHECK_FALSE(c.capturing());
  CHECK(dw.read() == w0);  // capturing ran nothing
  for (int i = 0; i < 3; ++i) g.launch();
  c.synchronize();
  check_bitwise(dw.read(), eager_w, "weights after 3 replays");
  check_bitwise(dy.read(), eager_y, "activations after 3 replays");
  check_bitwise(ddb.read(), eager_db, "column sums after 3 replays");

  strata::cuda::Graph moved = std::move(g);
  CHECK(g.empty());
  CHECK_THROWS_AS(g.launch(), strata::Error);
  reset();
  moved.launch();
  c.synchronize();
  CHECK(dw.read() != w0);
}

TEST_CASE("upload, download and synchronize refuse to be captured; nested captures are refused") {
  strata::cuda::CudaCompute c{0};
  Dev<float> d(c, 16, 1.f);
  std::vector<float> h(16);
  c.begin_capture();
  CHECK_THROWS_WITH_AS(c.download(h.data(), d, 64), doctest::Contains("cannot be captured"), strata::Error);
  CHECK_THROWS_AS(c.upload(d, h.data(), 64), strata::Error);
  CHECK_THROWS_AS(c.synchronize(), strata::Error);
  CHECK_THROWS_AS(c.begin_capture(), strata::Error);
  c.fill(d, 2.f, 16);
  strata::cuda::Graph g = c.end_capture();
  CHECK_THROWS_AS((void)c.end_capture(), strata::Error);
  CHECK(d.read() == std::vector<float>(16, 1.f));
  g.launch();
  CHECK(d.read() == std::vector<float>(16, 2.f));
}

TEST_CASE("upload lets the caller reuse its source at once; large copies are chunked") {
  strata::cuda::CudaCompute c{0};
  const std::size_t n = (std::size_t{20} << 20) / sizeof(float) + 12345;  // 20 MiB and a bit: 3 staging chunks
  auto src = random_floats(n, 4);
  const auto original = src;
  float* d = static_cast<float*>(c.allocate(n * sizeof(float)));
  float* e = static_cast<float*>(c.allocate(n * sizeof(float)));
  c.upload(d, src.data(), n * sizeof(float));
  for (float& v : src) v = -1.f;  // overwritten before the copy can have finished
  c.upload(e, src.data(), n * sizeof(float));
  std::vector<float> back(n), back_e(n);
  c.download(back.data(), d, n * sizeof(float));
  c.download(back_e.data(), e, n * sizeof(float));
  check_bitwise(back, original, "the first upload");
  check_bitwise(back_e, src, "the second upload");
  c.deallocate(d, n * sizeof(float));
  c.deallocate(e, n * sizeof(float));
  CHECK(c.allocate(0) == nullptr);
}

TEST_CASE("an allocation that cannot fit is a CudaOutOfMemory naming the bytes and the device") {
  strata::cuda::CudaCompute c{0};
  const std::size_t pib = std::size_t{1} << 50;
  try {
    (void)c.allocate(pib);
    FAIL("allocating 1 PiB succeeded");
  } catch (const strata::CudaOutOfMemory& e) {
    CHECK(e.bytes() == pib);
    CHECK(e.device() == 0);
    CHECK(std::string(e.what()).find("1125899906842624 bytes on device 0") != std::string::npos);
    CHECK(e.call() == "cudaMallocAsync");
  }
  Dev<float> ok(c, 4, 3.f);  // the failure left no error behind
  CHECK(ok.read() == std::vector<float>(4, 3.f));
}

TEST_CASE("events time and order work on a stream") {
  strata::cuda::CudaCompute c{0};
  strata::cuda::Event a{true}, b{true};
  Dev<float> d(c, 1 << 20);
  a.record(c.stream());
  c.fill(d, 1.f, 1 << 20);
  b.record(c.stream());
  CHECK(b.elapsed_ms(a) >= 0.f);
  CHECK(b.query());
  strata::cuda::Stream other{0};
  b.wait(other.get());  // another stream waits for the fill, on the device
  other.synchronize();
}

}  // namespace graph_gpu_test
