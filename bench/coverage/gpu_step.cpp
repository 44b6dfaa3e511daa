// The training steps whose lines docs/gpu-coverage.md counts: an MNIST-like
// MLP (Dense 784->128 ReLU -> Dense 10) and a small CNN (Conv2D, ReLU,
// MaxPool2D, Flatten, Dense), Adam, sparse cross-entropy from logits and
// accuracy, eager steps under OneDeviceStrategy{strata::gpu(0)} on
// synthetic data, with gpu(0) computing on the host:
//   gpu_step standin   the GPU stand-in (kernels::DeviceStandIn, Where::StandIn, DenseOrder::Device)
//   gpu_step host      the host's own compute (HostCompute, Where::Host): CI's stand-in before it was a device
//   gpu_step mirrored  the MLP under MirroredStrategy{strata::virtual_gpus(0, 2)} on the stand-in, its
//                      gradients summed by the device team's collectives over the host runtime
//                      (strata::detail::make_stand_in_collectives, as tests/device/host_as_gpu.hpp): once flat
//                      (all_reduce_sum), once with ExecutorOptions::bucket_bytes (the started sums, on side streams)
// Built with --coverage and read with gcov by bench/coverage/measure.sh.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <strata/data/dataset.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/kernels/host/device_stand_in.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/device/stand_in_collectives.hpp>

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

template <class Strategy, class Make>
double train(const char* what, Strategy& s, Make make, const Data& d, std::size_t batch) {
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
  const std::string mode = argc < 2 ? "standin" : argv[1];
  if (mode != "standin" && mode != "host" && mode != "mirrored") {
    std::fprintf(stderr, "usage: %s [standin|host|mirrored]\n", argv[0]);
    return 2;
  }
  const bool stand_in = mode != "host";
  strata::detail::gpu_backend().make = stand_in ? &make_stand_in : &make_host;
  // several replicas: the device team's collectives over the host runtime, as tests/device/host_as_gpu.hpp; one
  // device: null, as when docs/gpu-coverage.md's first rows were measured
  strata::detail::gpu_backend().make_collectives = mode == "mirrored" ? &strata::detail::make_stand_in_collectives
                                                                      : nullptr;
  std::printf("gpu(i) computes on: %s\n", stand_in ? "DeviceStandIn (Where::StandIn, DenseOrder::Device)"
                                                   : "HostCompute (Where::Host)");
  const Data d = synthetic(512, 3);
  auto mlp = [] {
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}},
                          nn::Dense{10}};
  };
  if (mode == "mirrored") {
    {
      strata::MirroredStrategy s{strata::virtual_gpus(0, 2)};
      train("MLP, 2 replicas on GPU 0, one sum", s, mlp, d, 128);
    }
    {
      // 4 KiB buckets: two, {Dense 10's kernel and bias} then {Dense 128's}, each summed by the started form
      strata::MirroredStrategy s{strata::virtual_gpus(0, 2)};
      s.executor_options().bucket_bytes = std::size_t{4} << 10;
      train("MLP, 2 replicas on GPU 0, 4 KiB buckets", s, mlp, d, 128);
    }
    return 0;
  }
  {
    strata::OneDeviceStrategy s{strata::gpu(0)};
    train("MLP", s, mlp, d, 128);
  }
  {
    strata::OneDeviceStrategy s{strata::gpu(0)};
    train("CNN", s, [] {
      return nn::Sequential{nn::Input{{28, 28}}, nn::Reshape{{28, 28, 1}}, nn::Conv2D{8, 3}, nn::ReLU{},
                            nn::MaxPool2D{2}, nn::Flatten{}, nn::Dense{10}};
    }, d, 128);
  }
  return 0;
}
