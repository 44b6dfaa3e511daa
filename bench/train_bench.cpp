// Training throughput, measured the way examples/mnist_mlp measures it, so
// that the two agree: the same model, optimizer, loss and seed, the same
// input pipeline (shuffle over the whole set, batch, prefetch 2), the same
// data (MNIST, standardized, when it is in ~/.cache/strata/mnist or --data;
// MNIST-shaped synthetic data otherwise), and the same timed region (one
// fit() of --epochs whole epochs of the training set, after the model is
// built). Each configuration runs --runs times, each run in a fresh
// process (as separate runs of the example are: what earlier runs freed
// changes how glibc serves the per-step batch buffers, by 10-20% on the
// same configuration, see docs/performance.md), and the median is reported
// with the spread: the machines this runs on are shared and noisy, and a
// single short measurement is not a number to compare.
//   ./build/bench/train_bench [--models mlp,cnn] [--strategies one_device,mirrored,central_storage]
//                             [--replicas 1,2] [--batch 128] [--epochs 5] [--runs 5] [--examples N] [--data DIR]
//                             [--device cpu|gpu]   (gpu: one_device on GPU 0, mirrored on --replicas GPU replicas
//                                                   spread over the GPUs, with the CUDA backend)
// Compare: ./build/examples/mnist_mlp --strategy mirrored --replicas 2 --quiet
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/data/mnist.hpp>
#include <strata/nn.hpp>
#include <strata/nn/conv2d.hpp>
#include <strata/nn/max_pool2d.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>

#if STRATA_HAS_NCCL  // bench/meson.build links strata-nccl whenever NCCL is built, else strata-cuda
#include <strata/nccl.hpp>
#elif STRATA_HAS_CUDA
#include <strata/cuda.hpp>
#endif

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
  std::string source;
};

// MNIST's training set standardized as the examples do (mean 0.1307, std
// 0.3081), or as many MNIST-shaped synthetic examples when it is not there.
Data load(const std::string& dir_arg, std::size_t limit) {
  const auto dir = dir_arg.empty() ? strata::data::default_mnist_dir() : std::filesystem::path(dir_arg);
  if (std::filesystem::exists(dir / "train-images-idx3-ubyte")) {
    auto m = strata::data::load_mnist(dir);
    const std::size_t n = limit ? std::min(limit, m.train_images.shape()[0]) : m.train_images.shape()[0];
    Data d{strata::Tensor<float>{{n, 28, 28}}, strata::Tensor<std::int32_t>{{n}}, "MNIST from " + dir.string()};
    std::copy_n(m.train_images.data(), d.x.size(), d.x.data());
    std::copy_n(m.train_labels.data(), n, d.y.data());
    for (float& v : d.x) v = (v - 0.1307f) / 0.3081f;
    return d;
  }
  const std::size_t n = limit ? limit : 60000;
  Data d{strata::Tensor<float>{{n, 28, 28}}, strata::Tensor<std::int32_t>{{n}},
         "synthetic (no MNIST in " + dir.string() +
             "; steps here can be slower than mnist_mlp's, whose MNIST loading changes how glibc serves the "
             "per-step batch buffers: see docs/performance.md)"};
  strata::Rng rng{1};
  for (auto& v : d.x) v = (rng.uniform() - 0.1307f) / 0.3081f;
  for (auto& v : d.y) v = static_cast<std::int32_t>(rng.below(10));
  return d;
}

struct Setup {
  std::size_t batch = 128;
  int epochs = 5;
  std::uint64_t seed = 0;
};

// samples/s of one run: what mnist_mlp prints (examples/mnist_common.hpp).
template <class S>
double run_once(S& s, const std::string& model, const Data& d, const Setup& u) {
  auto m = s.scope([&] { return make(model); });
  m.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
            {.seed = u.seed});
  (void)m.summary();  // builds, as the example's summary does, outside the timed region
  const std::size_t n = d.x.shape()[0];
  auto train = strata::data::from_tensor_slices(d.x, d.y).shuffle(n, u.seed).batch(u.batch).prefetch(2);
  const double t0 = bench::now_s();
  m.fit(s.distribute(train), {.epochs = u.epochs, .verbose = nn::Verbosity::Silent});
  return static_cast<double>(n) * u.epochs / (bench::now_s() - t0);
}

// The shell's single-quoted form of `s`.
std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `self --child 1 <args>` and returns the samples/s it prints.
double run_child(const std::string& self, const std::string& args) {
  const std::string cmd = shell_quoted(self) + " --child 1" + args;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) throw strata::Error("train_bench: cannot start " + cmd);
  double sps = -1;
  const int got = std::fscanf(f, "%lf", &sps);
  const int status = pclose(f);
  if (got != 1 || status != 0 || !(sps > 0))
    throw strata::Error("train_bench: the measuring process failed (exit status " + std::to_string(status) +
                        "): " + cmd);
  return sps;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> models{"mlp"}, strategies{"one_device", "mirrored", "central_storage"};
  std::vector<int> replicas{1, 2};
  Setup u;
  int runs = 5;
  bool child = false;  // measure one run of one configuration and print its samples/s
  std::size_t examples = 0;
  std::string data_dir, device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--models") models = bench::split_commas(v);
    else if (k == "--strategies") strategies = bench::split_commas(v);
    else if (k == "--replicas") replicas = bench::parse_ints(v);
    else if (k == "--batch") u.batch = std::stoul(v);
    else if (k == "--epochs") u.epochs = std::stoi(v);
    else if (k == "--runs") runs = std::stoi(v);
    else if (k == "--examples") examples = std::stoul(v);
    else if (k == "--data") data_dir = v;
    else if (k == "--child") child = v == "1";
    else if (k == "--device") device = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (runs < 1 || u.epochs < 1 || u.batch < 1) {
    std::fprintf(stderr, "--runs, --epochs and --batch must be at least 1\n");
    return 2;
  }
  if (device != "cpu" && device != "gpu") {
    std::fprintf(stderr, "--device is cpu or gpu, got %s\n", device.c_str());
    return 2;
  }
  const strata::Device dev = device == "gpu" ? strata::gpu(0) : strata::cpu(0);
  if (dev.is_gpu() && strata::gpu_count() == 0) {
    std::fprintf(stderr, "train_bench: --device gpu, but this build has no CUDA backend or the machine no GPU\n");
    return 77;
  }
  if (dev.is_gpu()) {  // GPUs train under one_device and mirrored (replicas spread over the GPUs: virtual GPUs on one)
    strategies.erase(std::remove_if(strategies.begin(), strategies.end(),
                                    [](auto& st) { return st != "one_device" && st != "mirrored"; }),
                     strategies.end());
    if (strategies.empty()) strategies = {"one_device"};
  }
  const Data d = load(data_dir, examples);
  if (child) {
    const double sps = strata::with_strategy(strategies.at(0), strata::StrategyChoice{.replicas = replicas.at(0), .device = dev,
                                                                    .gpus = dev.is_gpu() ? strata::gpu_count() : 0},
                                             [&](auto& s) { return run_once(s, models.at(0), d, u); });
    std::printf("%.1f\n", sps);
    return 0;
  }
  std::string common = " --device " + device + " --batch " + std::to_string(u.batch) + " --epochs " + std::to_string(u.epochs) +
                       " --examples " + std::to_string(examples);
  if (!data_dir.empty()) common += " --data " + shell_quoted(data_dir);
  std::printf("# training throughput as examples/mnist_mlp measures it: fit() of %d epoch(s) of %zu examples, %s;\n"
              "# shuffle + batch %zu + prefetch 2, Adam; median of %d runs (each in a fresh process); %u cores; device %s\n",
              u.epochs, d.x.shape()[0], d.source.c_str(), u.batch, runs, std::thread::hardware_concurrency(),
              strata::describe(dev).c_str());
  std::printf("%6s %16s %9s %14s %10s %10s %9s %11s\n", "model", "strategy", "replicas", "median/s", "min/s", "max/s",
              "speedup", "efficiency");
  for (const auto& model : models) {
    double base = 0;  // the first one-replica row's median: speedups are against it
    for (const auto& st : strategies)
      for (int p : replicas) {
        if (st == "one_device" && p != 1) continue;
        std::vector<double> sps;
        for (int r = 0; r < runs; ++r)
          sps.push_back(run_child(argv[0], common + " --models " + shell_quoted(model) + " --strategies " + shell_quoted(st) +
                                               " --replicas " + std::to_string(p)));
        const double med = median(sps);
        if (base == 0 && p == 1) base = med;
        std::printf("%6s %16s %9d %14.0f %10.0f %10.0f", model.c_str(), st.c_str(), p, med,
                    *std::min_element(sps.begin(), sps.end()), *std::max_element(sps.begin(), sps.end()));
        if (base > 0) std::printf(" %8.2fx %10.0f%%\n", med / base, 100.0 * med / base / p);
        else std::printf(" %9s %11s\n", "-", "-");  // no one-replica row to compare with
        std::fflush(stdout);
      }
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
  return 1;
}
