// The training steps whose lines docs/gpu-coverage.md counts: an MNIST-like
// MLP (Dense 784->128 ReLU -> Dense 10) and a small CNN (Conv2D, ReLU,
// MaxPool2D, Flatten, Dense), Adam, sparse cross-entropy from logits and
// accuracy, eager steps under OneDeviceStrategy{strata::gpu(0)} on
// synthetic data, with gpu(0) computing on the host:
//   gpu_step standin   the GPU stand-in (kernels::DeviceStandIn, Where::StandIn, DenseOrder::Device)
//   gpu_step host      the host's own compute (HostCompute, Where::Host): CI's stand-in before it was a device
// Built with --coverage and read with gcov by bench/coverage/measure.sh.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include <strata/data/dataset.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/kernels/host/device_stand_in.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/device_compute.hpp>

namespace {

namespace nn = strata::nn;
namespace k = strata::kernels;

std::unique_ptr<k::Compute> make_stand_in(int device, strata::MatmulPrecision) {
  return std::make_unique<k::DeviceStandIn>(device, k::DenseOrder::Device);
}
std::unique_ptr<k::Compute> make_host(int, strata::MatmulPrecision) { return std::make_unique<k::HostCompute>(); }

struct Data {
  strata::Tensor<float> x;
  strata::Tensor<std::int32_t> y;
};
Data synthetic(std::size_t n, std::uint64_t seed) {
  Data d{strata::Tensor<float>{{n, 28, 28}}, strata::Tensor<std::int32_t>{{n}}};
  nn::Rng rng{seed};
  for (std::size_t i = 0; i < n; ++i) {
    d.y[i] = static_cast<std::int32_t>(i % 10);
    for (std::size_t j = 0; j < 784; ++j) d.x[i * 784 + j] = rng.uniform() + (j % 10 == i % 10 ? 0.5f : 0.f);
  }
  return d;
}

template <class Make>
double train(const char* what, Make make, const Data& d, std::size_t batch) {
  strata::OneDeviceStrategy s{strata::gpu(0)};
  auto model = s.scope(make);
  model.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 1});
  auto h = model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(batch)),
                     {.epochs = 1, .verbose = nn::Verbosity::Silent});
  const double loss = h.epochs().back().at("loss");
  std::printf("%s: loss %.4f after %zu steps\n", what, loss, d.y.size() / batch);
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  const bool stand_in = argc < 2 || std::strcmp(argv[1], "standin") == 0;
  if (argc >= 2 && !stand_in && std::strcmp(argv[1], "host") != 0) {
    std::fprintf(stderr, "usage: %s [standin|host]\n", argv[0]);
    return 2;
  }
  strata::detail::gpu_backend().make = stand_in ? &make_stand_in : &make_host;
  strata::detail::gpu_backend().make_collectives = nullptr;  // host-staged, as tests/host_as_gpu.hpp
  std::printf("gpu(0) computes on: %s\n", stand_in ? "DeviceStandIn (Where::StandIn, DenseOrder::Device)"
                                                   : "HostCompute (Where::Host)");
  const Data d = synthetic(512, 3);
  train("MLP", [] {
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}},
                          nn::Dense{10}};
  }, d, 128);
  train("CNN", [] {
    return nn::Sequential{nn::Input{{28, 28}}, nn::Reshape{{28, 28, 1}}, nn::Conv2D{8, 3}, nn::ReLU{},
                          nn::MaxPool2D{2}, nn::Flatten{}, nn::Dense{10}};
  }, d, 128);
  return 0;
}
