// Training throughput: samples/s of mnist_mlp and mnist_cnn at a fixed global
// batch for each strategy and replica count, with scaling efficiency against
// the one-device run of the same model. MNIST-shaped synthetic data (the
// speed of a step does not depend on pixel values), so no download needed.
//   ./build/bench/train_bench [--models mlp,cnn] [--strategies one_device,mirrored,central_storage]
//                             [--replicas 1,2] [--batch 128] [--seconds 3]
#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/nn/conv2d.hpp>
#include <strata/nn/max_pool2d.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>

#include "bench_util.hpp"

namespace nn = strata::nn;

namespace {

nn::Sequential make(const std::string& model) {
  if (model == "mlp")
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}},
                          nn::Dense{10}};
  if (model == "cnn")
    return nn::Sequential{nn::Input{{28, 28}}, nn::Reshape{{28, 28, 1}}, nn::Conv2D{32, 3}, nn::ReLU{},
                          nn::MaxPool2D{2}, nn::Conv2D{64, 3}, nn::ReLU{}, nn::MaxPool2D{2}, nn::Flatten{},
                          nn::Dense{128, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
  throw strata::Error("unknown model " + model + " (mlp, cnn)");
}

struct Data {
  strata::Tensor<float> x;
  strata::Tensor<std::int32_t> y;
};

// samples/s of `model` under strategy `s`: one warm-up epoch, then epochs
// until `seconds` have passed.
template <class S>
double measure(S& s, const std::string& model, const Data& d, std::size_t batch, double seconds) {
  auto m = s.scope([&] { return make(model); });
  m.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}});
  auto ds = s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(batch, true));
  m.fit(ds, {.verbose = nn::Verbosity::Silent, .steps_per_epoch = 10});
  std::size_t samples = 0;
  const double t0 = bench::now_s();
  double t = 0;
  do {
    m.fit(ds, {.verbose = nn::Verbosity::Silent});
    samples += d.x.shape()[0] / batch * batch;
    t = bench::now_s() - t0;
  } while (t < seconds);
  return static_cast<double>(samples) / t;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models{"mlp", "cnn"}, strategies{"one_device", "mirrored", "central_storage"};
  std::vector<int> replicas{1, 2};
  std::size_t batch = 128;
  double seconds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--models") models = bench::split_commas(v);
    else if (k == "--strategies") strategies = bench::split_commas(v);
    else if (k == "--replicas") replicas = bench::parse_ints(v);
    else if (k == "--batch") batch = std::stoul(v);
    else if (k == "--seconds") seconds = std::stod(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  // 8192 examples of pseudo-random pixels and labels
  const std::size_t n = 8192;
  Data d{strata::Tensor<float>{{n, 28, 28}}, strata::Tensor<std::int32_t>{{n}}};
  nn::Rng rng{1};
  for (auto& v : d.x) v = rng.uniform();
  for (auto& v : d.y) v = static_cast<std::int32_t>(rng.below(10));

  std::printf("# training throughput, global batch %zu, Adam, %u cores\n", batch, std::thread::hardware_concurrency());
  std::printf("%6s %16s %9s %14s %9s %11s\n", "model", "strategy", "replicas", "samples/s", "speedup", "efficiency");
  for (const auto& model : models) {
    const double base = measure(strata::get_strategy(), model, d, batch, seconds);  // one replica, caller's thread
    for (const auto& st : strategies)
      for (int p : replicas) {
        if (st == "one_device" && p != 1) continue;
        const double sps = strata::with_strategy(st, p, [&](auto& s) { return measure(s, model, d, batch, seconds); });
        std::printf("%6s %16s %9d %14.0f %8.2fx %10.0f%%\n", model.c_str(), st.c_str(), p, sps, sps / base,
                    100.0 * sps / base / p);
        std::fflush(stdout);
      }
  }
}
