// Captured steps on a GPU (ExecutorOptions::capture_steps): each training
// step of OneDeviceStrategy{gpu(0)} one CUDA graph launch, replayed bitwise
// as the same steps run eagerly on the GPU (tests/execution/captured_steps_test.cpp
// checks the same on the host's compute with a graph's rules; this runs the
// real capture: cudaStreamBeginCapture over cuBLAS and strata's kernels).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <strata/cuda.hpp>
#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "gpu_util.hpp"

namespace captured_steps_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

namespace nn = strata::nn;

namespace {

struct Run {
  std::vector<float> w;
  std::int64_t iterations = 0;
  double loss = 0, accuracy = 0, skipped = 0;
};

Run train(const strata_test::Blobs& data, bool capture, std::size_t batch, int epochs) {
  strata::OneDeviceStrategy s{strata::gpu(0)};
  s.executor_options().capture_steps = capture;
  s.executor_options().read_every = 7;
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{64, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                          nn::Dropout{0.2f}, nn::Dense{32}, nn::ReLU{}, nn::Dense{3}};
  });
  model.compile(nn::Adam{nn::ExponentialDecay{0.01f, 20, 0.8f}},
                nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 3});
  auto h = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(batch)),
                     {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  Run r{strata_test::flat_weights(model), model.iterations(), h.epochs().back().at("loss"),
        h.epochs().back().at("accuracy"), h.epochs().back().contains("skipped_steps") ? h.epochs().back().at("skipped_steps") : 0};
  return r;
}

}  // namespace

TEST_CASE("captured GPU steps (CUDA graphs) give the eager GPU steps' weights bit for bit") {
  const strata_test::Blobs data = strata_test::blobs(1000, 5);  // batches of 64: 15 full, then 40 rows
  const Run eager = train(data, false, 64, 4);
  const Run graph = train(data, true, 64, 4);
  CHECK(graph.iterations == eager.iterations);
  CHECK(graph.w == eager.w);
  // the sums are added atomically on a GPU (not bitwise), and in another grouping
  CHECK(graph.loss == doctest::Approx(eager.loss).epsilon(1e-9));
  CHECK(graph.accuracy == eager.accuracy);
  CHECK(eager.accuracy > 0.8);
}

TEST_CASE("a captured GPU step with a NaN gradient is skipped on the device, as eagerly") {
  strata_test::Blobs data = strata_test::blobs(640, 5);
  data.x[(3 * 64 + 1) * 6] = std::numeric_limits<float>::quiet_NaN();
  const Run eager = train(data, false, 64, 2);
  const Run graph = train(data, true, 64, 2);
  CHECK(eager.iterations == 18);
  CHECK(graph.iterations == eager.iterations);
  CHECK(graph.w == eager.w);
  CHECK(graph.skipped == 1.0);
}

}  // namespace captured_steps_gpu_test
