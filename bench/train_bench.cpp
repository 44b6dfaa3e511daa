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
//                             [--breakdown]        (where a step's time goes, per track, from the trace's spans)
//                             [--trace-overhead]   (each configuration untraced and traced to a file, interleaved)
//                             [--capture]          (gpu: one_device again with its steps captured, a CUDA graph
//                                                   each, interleaved with the eager runs: ExecutorOptions::capture_steps)
//                             [--bucket-mb 0,1,4]  (gradient buckets of MB MiB, fractional allowed, 0: one flat
//                                                   all-reduce: ExecutorOptions::bucket_bytes)
//                             [--zero 0,1,2,3]     (ZeRO stage: ExecutorOptions::sharded_update; default: the
//                                                   strategy's choice)
//                             [--compression none,bf16,fp16]  (ExecutorOptions::compression)
//                             [--steps-per-execution 1,8]  (CompileOptions::steps_per_execution: steps a run of
//                                                   the replicas takes, the callbacks once per run)
//                             (every combination of the last four lists runs interleaved, a row each, the first
//                             the main row; each row also gives the run's peak resident memory, VmHWM)
// Models: mlp (784-128-10), cnn, wide (784-2048-2048-10, 5.8M parameters: a
// model where the gradient's communication matters, issue 25), deep
// (784-1024x4-10, 3.9M parameters in four near-equal layers: where ZeRO 3's
// windows of the largest layer are a small part of the model).
// Compare: ./build/examples/mnist_mlp --strategy mirrored --replicas 2 --quiet
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <optional>
#include <thread>
#include <vector>

#include <unistd.h>

#include <strata/data/dataset.hpp>
#include <strata/data/mnist.hpp>
#include <strata/nn.hpp>
#include <strata/nn/layers/conv2d.hpp>
#include <strata/nn/layers/max_pool2d.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/parallel/zero/fully_sharded.hpp>

#if STRATA_HAS_NCCL  // bench/meson.build links strata-nccl whenever NCCL is built, else strata-cuda
#include <strata/nccl.hpp>
#elif STRATA_HAS_CUDA
#include <strata/cuda.hpp>
#endif

#include <strata/core/trace_session.hpp>

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
  if (model == "wide")
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{2048, {.activation = nn::Activation::ReLU}},
                          nn::Dense{2048, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
  if (model == "deep")
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{1024, {.activation = nn::Activation::ReLU}},
                          nn::Dense{1024, {.activation = nn::Activation::ReLU}},
                          nn::Dense{1024, {.activation = nn::Activation::ReLU}},
                          nn::Dense{1024, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
  throw strata::Error("unknown model " + model + " (mlp, cnn, wide, deep)");
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
  std::string trace = "none";  // a child's recording: none, file (a trace file in /tmp), totals (for --breakdown)
  bool capture = false;        // a child's one_device steps captured (ExecutorOptions::capture_steps)
  double bucket_mb = 0;        // a child's gradient buckets (ExecutorOptions::bucket_bytes), MiB
  int zero = -1;               // a child's ZeRO stage (ExecutorOptions::sharded_update); -1: the default
  std::string compression = "none";  // a child's ExecutorOptions::compression
  std::size_t steps_per_execution = 1;  // a child's CompileOptions::steps_per_execution
};


// --breakdown's categories, in its columns' order.
constexpr strata::trace::Category kShown[] = {
    strata::trace::Category::Data,       strata::trace::Category::Forward, strata::trace::Category::Backward,
    strata::trace::Category::Loss,       strata::trace::Category::Collective, strata::trace::Category::Wait,
    strata::trace::Category::Update,     strata::trace::Category::Callback, strata::trace::Category::Step};

std::string breakdown_lines;  // a child's --trace-mode totals, printed after its samples/s
double state_mib = 0;         // a child's model state per replica at its ZeRO stage (fully_sharded.hpp's formula), MiB

// samples/s of one run: what mnist_mlp prints (examples/mnist_common.hpp).
template <class S>
double run_once(S& s, const std::string& model, const Data& d, const Setup& u) {
  if constexpr (requires { s.executor_options().capture_steps; }) s.executor_options().capture_steps = u.capture;
  if constexpr (requires { s.executor_options().bucket_bytes; })
    s.executor_options().bucket_bytes = static_cast<std::size_t>(u.bucket_mb * 1048576.0);
  if constexpr (requires { s.executor_options().sharded_update; }) {
    if (u.zero >= 0) s.executor_options().sharded_update = *strata::sharded_update_for_stage(u.zero);
    s.executor_options().compression = strata::compression_named(u.compression).value_or(strata::Compression::None);
  }
  auto m = s.scope([&] { return make(model); });
  m.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
            {.seed = u.seed, .steps_per_execution = u.steps_per_execution});
  (void)m.summary();  // builds, as the example's summary does, outside the timed region
  const std::size_t n = d.x.shape()[0];
  auto train = strata::data::from_tensor_slices(d.x, d.y).shuffle(n, u.seed).batch(u.batch).prefetch(2);
  std::optional<strata::trace::Session> trace;
  const std::string file = "/tmp/train_bench_trace_" + std::to_string(::getpid()) + ".json";
  if (u.trace != "none") trace.emplace(strata::trace::Options{.path = u.trace == "file" ? file : ""});
  const double t0 = bench::now_s();
  m.fit(s.distribute(train), {.epochs = u.epochs, .verbose = nn::Verbosity::Silent});
  const double seconds = bench::now_s() - t0;
  if (trace) trace->finish();
  if constexpr (requires { s.executor_options().sharded_update; s.devices(); s.num_local_replicas(); }) {
    const auto p = static_cast<std::size_t>(s.num_local_replicas());
    std::vector<std::size_t> units;  // each layer's parameters
    for (std::size_t l = 0; l < m.layers().size(); ++l) {
      std::size_t k = 0;
      for (const auto& spec : m.layers()[l]->params()) k += spec.shape.elements();
      units.push_back(k);
    }
    const strata::detail::ShardLayout layout(units, p);
    const std::size_t n = layout.params(), pair = layout.window_pair();
    const int stage = strata::zero_stage(s.executor_options().sharded_update, p);  // CPU or GPU replicas alike
    const bool compressed = s.executor_options().compression != strata::Compression::None;
    state_mib = static_cast<double>(strata::detail::model_state_bytes(stage, n, p, 2, pair, compressed)) / 1048576.0;
  }
  if (u.trace == "file") std::filesystem::remove(file);
  if (u.trace == "totals") {  // printed after the samples/s: "TRACK|steps|wall_ms|ms per step of each shown category"
    const double steps = static_cast<double>(u.epochs) * static_cast<double>((n + u.batch - 1) / u.batch);
    char b[64];
    for (const auto& t : trace->totals()) {
      std::snprintf(b, sizeof b, "|%.0f|%.6f", steps, 1e3 * seconds / steps);
      breakdown_lines += t.name;
      breakdown_lines += b;
      for (auto c : kShown) {
        std::snprintf(b, sizeof b, "|%.6f", 1e-6 * static_cast<double>(t.self_ns[static_cast<int>(c)]) / steps);
        breakdown_lines += b;
      }
      breakdown_lines += '\n';
    }
  }
  return static_cast<double>(n) * u.epochs / seconds;
}

// The shell's single-quoted form of `s`.
std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `self --child 1 <args>` and returns the samples/s it prints (its
// peak resident memory into `peak`, the breakdown's lines after it into `rest`).
double run_child(const std::string& self, const std::string& args, std::string* rest = nullptr,
                 std::vector<double>* peak = nullptr, double* state = nullptr) {
  const std::string cmd = shell_quoted(self) + " --child 1" + args;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) throw strata::Error("train_bench: cannot start " + cmd);
  double sps = -1, mib = 0, st = 0;
  const int got = std::fscanf(f, "%lf %lf %lf", &sps, &mib, &st) >= 1 ? 1 : 0;
  if (peak) peak->push_back(mib);
  if (state) *state = st;
  for (char buf[512]; std::fgets(buf, sizeof buf, f);)
    if (rest) *rest += buf;
  const int status = pclose(f);
  if (got != 1 || status != 0 || !(sps > 0))
    throw strata::Error("train_bench: the measuring process failed (exit status " + std::to_string(status) +
                        "): " + cmd);
  return sps;
}

// --breakdown: one more run, recorded (totals only), and each track's own
// time per step in each category; "idle" is the rest of the step's wall time.
void print_breakdown(const std::string& self, const std::string& args) {
  std::string rest;
  run_child(self, args + " --trace-mode totals", &rest);
  std::printf("       %-12s %8s", "ms/step", "wall");
  for (auto c : kShown) std::printf(" %9s", c == strata::trace::Category::Collective ? "reduce"
                                                : c == strata::trace::Category::Step ? "dispatch"
                                                                                     : strata::trace::category_name(c));
  std::printf(" %9s\n", "idle");
  std::size_t at = 0;
  while ((at = rest.find('\n', at)) != std::string::npos) {
    const std::size_t end = rest.find('\n', at + 1);
    std::string line = rest.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
    at = end == std::string::npos ? rest.size() : end;
    std::vector<std::string> f;
    for (std::size_t b = 0, e; b <= line.size(); b = e + 1) {
      e = line.find('|', b);
      if (e == std::string::npos) e = line.size();
      f.push_back(line.substr(b, e - b));
    }
    if (f.size() != 3 + std::size(kShown)) continue;
    const double wall = std::stod(f[2]);
    double busy = 0;
    std::printf("       %-12s %8.4f", f[0].c_str(), wall);
    for (std::size_t k = 0; k < std::size(kShown); ++k) {
      const double v = std::stod(f[3 + k]);
      busy += v;
      std::printf(" %9.4f", v);
    }
    std::printf(" %9.4f\n", std::max(0.0, wall - busy));
  }
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
  bool breakdown = false, overhead = false, capture = false;
  std::size_t examples = 0;
  std::string data_dir, device = "cpu";
  std::vector<std::string> buckets{"0"};  // --bucket-mb: MiB per gradient bucket, one run of each per round
  std::vector<std::string> zeros{""}, compressions{"none"};  // --zero ("": the default), --compression
  std::vector<int> executions{1};  // --steps-per-execution
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
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
    else if (k == "--trace-mode") u.trace = v;
    else if (k == "--capture-steps") u.capture = v == "1";
    else if (k == "--bucket-mb") buckets = bench::split_commas(v);
    else if (k == "--zero") zeros = bench::split_commas(v);
    else if (k == "--zero-stage") u.zero = std::stoi(v);
    else if (k == "--compression") compressions = bench::split_commas(v);
    else if (k == "--steps-per-execution") executions = bench::parse_ints(v);
    else if (k == "--spe") u.steps_per_execution = std::stoul(v);
    else if (k == "--breakdown" || k == "--trace-overhead" || k == "--capture") {
      (k == "--breakdown" ? breakdown : k == "--capture" ? capture : overhead) = true;
      --i;  // a flag: no value
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (runs < 1 || u.epochs < 1 || u.batch < 1) {
    std::fprintf(stderr, "--runs, --epochs and --batch must be at least 1\n");
    return 2;
  }
  for (const auto& b : buckets) {
    char* end = nullptr;
    const double mb = std::strtod(b.c_str(), &end);
    if (b.empty() || *end || !(mb >= 0)) {
      std::fprintf(stderr, "--bucket-mb takes MiB per bucket (0: one flat all-reduce), got %s\n", b.c_str());
      return 2;
    }
  }
  for (const auto& z : zeros)
    if (!z.empty() && (z.size() != 1 || z[0] < '0' || z[0] > '3')) {
      std::fprintf(stderr, "--zero takes ZeRO stages 0-3, got %s\n", z.c_str());
      return 2;
    }
  for (const auto& c : compressions)
    if (!strata::compression_named(c)) {
      std::fprintf(stderr, "--compression is none, bf16 or fp16, got %s\n", c.c_str());
      return 2;
    }
  for (int e : executions)
    if (e < 1) {
      std::fprintf(stderr, "--steps-per-execution takes step counts of at least 1, got %d\n", e);
      return 2;
    }
  u.bucket_mb = std::strtod(buckets.at(0).c_str(), nullptr);
  u.steps_per_execution = static_cast<std::size_t>(executions.at(0));
  u.compression = compressions.at(0);
  // the rows: every (bucket size, stage, compression), the first the main one
  struct Variant {
    std::string args, label;
  };
  std::vector<Variant> variants;
  for (const auto& b : buckets)
    for (const auto& z : zeros)
      for (const auto& c : compressions)
        for (int e : executions) {
          Variant v;
          if (buckets.size() > 1 || b != "0") v.args += " --bucket-mb " + b, v.label += "buckets " + b + " MiB ";
          if (!z.empty()) v.args += " --zero-stage " + z, v.label += "ZeRO " + z + " ";
          if (compressions.size() > 1 || c != "none") v.args += " --compression " + c, v.label += c + " ";
          if (executions.size() > 1 || e != 1)
            v.args += " --spe " + std::to_string(e), v.label += std::to_string(e) + " steps/execution ";
          variants.push_back(v);
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
    std::printf("%.1f %.1f %.2f\n%s", sps, bench::peak_rss_mib(), state_mib, breakdown_lines.c_str());
    return 0;
  }
  std::string common = " --device " + device + " --batch " + std::to_string(u.batch) + " --epochs " + std::to_string(u.epochs) +
                       " --examples " + std::to_string(examples);
  if (!data_dir.empty()) common += " --data " + shell_quoted(data_dir);
  std::printf("# training throughput as examples/mnist_mlp measures it: fit() of %d epoch(s) of %zu examples, %s;\n"
              "# shuffle + batch %zu + prefetch 2, Adam; median of %d runs (each in a fresh process); %u cores; device %s\n",
              u.epochs, d.x.shape()[0], d.source.c_str(), u.batch, runs, std::thread::hardware_concurrency(),
              strata::describe(dev).c_str());
  std::printf("# peak MiB: the process's VmHWM (all its replicas, the data, the model); state MiB: one replica's\n"
              "# values, gradient and Adam's two slots at its ZeRO stage (parallel/zero/fully_sharded.hpp's formula)\n");
  std::printf("%6s %16s %9s %14s %10s %10s %9s %11s %9s %10s\n", "model", "strategy", "replicas", "median/s", "min/s",
              "max/s", "speedup", "efficiency", "peak MiB", "state MiB");
  for (const auto& model : models) {
    double base = 0;  // the first one-replica row's median: speedups are against it
    for (const auto& st : strategies)
      for (int p : replicas) {
        if (st == "one_device" && p != 1) continue;
        std::vector<double> sps, traced, graphed;
        std::vector<std::vector<double>> varied(variants.size()), peaks(variants.size());  // per row
        std::vector<double> states(variants.size());
        const bool graphs = capture && dev.is_gpu() && st == "one_device";
        std::string args = common;
        args += " --models ";
        args += shell_quoted(model);
        args += " --strategies ";
        args += shell_quoted(st);
        args += " --replicas ";
        args += std::to_string(p);
        const std::string common_args = args;
        args += variants[0].args;
        for (int r = 0; r < runs; ++r) {
          sps.push_back(run_child(argv[0], args, nullptr, &peaks[0], &states[0]));
          for (std::size_t k = 1; k < variants.size(); ++k)  // interleaved: same noise
            varied[k].push_back(run_child(argv[0], common_args + variants[k].args, nullptr, &peaks[k], &states[k]));
          if (overhead) traced.push_back(run_child(argv[0], args + " --trace-mode file"));  // interleaved: same noise
          if (graphs) graphed.push_back(run_child(argv[0], args + " --capture-steps 1"));
        }
        const double med = median(sps);
        if (base == 0 && p == 1) base = med;
        std::printf("%6s %16s %9d %14.0f %10.0f %10.0f", model.c_str(), st.c_str(), p, med,
                    *std::min_element(sps.begin(), sps.end()), *std::max_element(sps.begin(), sps.end()));
        if (base > 0) std::printf(" %8.2fx %10.0f%%", med / base, 100.0 * med / base / p);
        else std::printf(" %9s %11s", "-", "-");  // no one-replica row to compare with
        std::printf(" %9.0f %10.1f%s%s\n", median(peaks[0]), states[0], variants[0].label.empty() ? "" : "   ",
                    variants[0].label.c_str());
        if (overhead)
          std::printf("%6s %16s %9s %14.0f %10.0f %10.0f   traced to a file: %+.1f%% time per sample\n", "", "", "",
                      median(traced), *std::min_element(traced.begin(), traced.end()),
                      *std::max_element(traced.begin(), traced.end()), 100.0 * (med / median(traced) - 1.0));
        if (graphs)
          std::printf("%6s %16s %9d %14.0f %10.0f %10.0f   captured steps: %.2fx the eager median\n", model.c_str(),
                      "one_device+graph", p, median(graphed), *std::min_element(graphed.begin(), graphed.end()),
                      *std::max_element(graphed.begin(), graphed.end()), median(graphed) / med);
        for (std::size_t k = 1; k < variants.size(); ++k)
          std::printf("%6s %16s %9d %14.0f %10.0f %10.0f %9s %11s %9.0f %10.1f   %s: %.2fx the first row's median\n", "",
                      "", p, median(varied[k]), *std::min_element(varied[k].begin(), varied[k].end()),
                      *std::max_element(varied[k].begin(), varied[k].end()), "", "", median(peaks[k]), states[k],
                      variants[k].label.c_str(), median(varied[k]) / med);
        if (breakdown) print_breakdown(argv[0], args);
        std::fflush(stdout);
      }
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
  return 1;
}
