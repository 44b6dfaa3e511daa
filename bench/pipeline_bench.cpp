// Pipeline model parallelism (PipelineStrategy) in one process: training
// samples/s and the measured idle ("bubble") fraction of each stage against
// the micro-batch count M, for S stages and each schedule, next to the
// theoretical bubble (S - 1) / (M + S - 1) (naive: (S - 1) / S whatever M).
// The model is balanced: --layers equal Dense(--width, ReLU) layers (the
// last without activation), so every stage gets the same work. Idle is
// measured per stage: 1 - (time computing) / (time from each step's start
// to the stage's end of it), summed over the timed steps.
//   ./build/bench/pipeline_bench [--stages 2,4] [--micro 1,2,4,8,16] [--width 256] [--layers 8] [--batch 256] [--steps 8] [--runs 3]
//   ./build/bench/pipeline_bench --csv > out.csv   (for bench/plot_pipeline.py)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

namespace nn = strata::nn;

namespace {

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t j = s.find(',', i);
    out.push_back(std::atoi(s.substr(i, j - i).c_str()));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

struct Config {
  std::size_t width = 256, layers = 8, batch = 256, steps = 8, runs = 3;
};

nn::Sequential model(const Config& c) {
  nn::Sequential m{nn::Input{{c.width}}};
  for (std::size_t l = 0; l < c.layers; ++l)
    m.add(nn::Dense{c.width, {.activation = l + 1 < c.layers ? nn::Activation::ReLU : nn::Activation::Linear}});
  return m;
}

struct Data {
  strata::Tensor<float> x;
  strata::Tensor<std::int32_t> y;
};
Data make_data(const Config& c) {
  const std::size_t n = c.batch * c.steps;
  Data d{strata::Tensor<float>{{n, c.width}}, strata::Tensor<std::int32_t>{{n}}};
  nn::Rng rng{3};
  for (std::size_t i = 0; i < d.x.size(); ++i) d.x[i] = rng.uniform() * 2.f - 1.f;
  for (std::size_t i = 0; i < n; ++i) d.y[i] = static_cast<std::int32_t>(i % c.width);
  return d;
}

// Trains 2 warm-up steps, then --runs timed epochs; returns the median
// epoch's samples/s (the stage statistics cover every timed epoch).
template <class S>
double samples_per_s(S& s, const Config& c, const Data& d) {
  auto m = s.scope([&] { return model(c); });
  m.compile(nn::SGD{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  auto ds = strata::data::from_tensor_slices(d.x, d.y).batch(c.batch);
  m.fit(s.distribute(ds), {.epochs = 1, .verbose = nn::Verbosity::Silent, .steps_per_epoch = 2});
  if constexpr (requires { s.pipeline_stats(); }) s.pipeline_stats().reset();
  std::vector<double> rates;
  for (std::size_t r = 0; r < c.runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    m.fit(s.distribute(ds), {.epochs = 1, .verbose = nn::Verbosity::Silent});
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(c.batch * c.steps) / dt);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::vector<int> stages{2, 4}, micro{1, 2, 4, 8, 16};
  bool csv = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--csv") csv = true;
    else if (a == "--stages" && has) stages = parse_ints(argv[++i]);
    else if (a == "--micro" && has) micro = parse_ints(argv[++i]);
    else if (a == "--width" && has) c.width = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--layers" && has) c.layers = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--batch" && has) c.batch = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--steps" && has) c.steps = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--runs" && has) c.runs = std::strtoul(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: pipeline_bench [--stages 2,4] [--micro 1,2,4,8,16] [--width N] [--layers N] "
                           "[--batch N] [--steps N] [--runs N] [--csv]\n");
      return 2;
    }
  }
  const Data d = make_data(c);
  strata::OneDeviceStrategy one;
  const double base = samples_per_s(one, c, d);
  if (csv) std::printf("S,schedule,M,samples_per_s,idle_mean,idle_stages,theory\n");
  else
    std::printf("%zu x Dense(%zu), batch %zu, median of %zu epochs of %zu steps; one replica: %.0f samples/s\n\n"
                "| S | schedule | M | samples/s | x one replica | idle, mean | idle per stage | theory |\n"
                "|---|---|---|---|---|---|---|---|\n",
                c.layers, c.width, c.batch, c.runs, c.steps, base);
  for (int S : stages)
    for (strata::Schedule k : {strata::Schedule::Naive, strata::Schedule::GPipe, strata::Schedule::OneFOneB})
      for (int M : micro) {
        strata::PipelineStrategy s{strata::cpu_replicas(S)};
        s.pipeline_options() = {.stages = {}, .micro_batches = static_cast<std::size_t>(M), .schedule = k};
        const double sps = samples_per_s(s, c, d);
        double mean = 0;
        std::string per;
        for (const auto& st : s.pipeline_stats().stages) {
          mean += st.idle_fraction() / S;
          char b[16];
          std::snprintf(b, sizeof b, "%s%.2f", per.empty() ? "" : csv ? ";" : " ", st.idle_fraction());
          per += b;
        }
        const double theory = k == strata::Schedule::Naive ? (S - 1.0) / S : (S - 1.0) / (M + S - 1.0);
        if (csv)
          std::printf("%d,%s,%d,%.1f,%.4f,%s,%.4f\n", S, std::string(strata::to_string(k)).c_str(), M, sps, mean,
                      per.c_str(), theory);
        else
          std::printf("| %d | %s | %d | %.0f | %.2f | %.2f | %s | %.2f |\n", S,
                      std::string(strata::to_string(k)).c_str(), M, sps, sps / base, mean, per.c_str(), theory);
        std::fflush(stdout);
      }
  return 0;
}
