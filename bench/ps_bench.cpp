// The parameter server, in one process:
//  1. pushes/s and pulls/s per server: W threads pulling and pushing (SGD)
//     every shard of the MNIST MLP's variables (101,770 floats) on S servers;
//  2. training samples/s of the MNIST MLP with W = 1, 2, 4 worker threads
//     (asynchronous), MNIST-shaped synthetic data;
//  3. the straggler: one worker (replica) 5x slower. Asynchronous training
//     keeps most of its throughput; synchronous mirrored training (and the
//     parameter server at staleness 0) drops to the straggler's pace;
//  4. what staleness costs: test accuracy after one epoch (60,000 samples)
//     of real MNIST for staleness 0, 1, 4 and unbounded (skipped without MNIST).
//   ./build/bench/ps_bench [--seconds 2] [--sections 1,2,3,4]
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/data/mnist.hpp>
#include <strata/nn.hpp>
#include <strata/strategy/parameter_server.hpp>
#include <strata/strata.hpp>

#include "bench_util.hpp"

namespace nn = strata::nn;
using strata::Tensor;

namespace {

nn::Sequential mlp() {
  return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}},
                        nn::Dense{10}};
}

// Sleeps in the forward pass of replica 0 only: a straggler in synchronous training.
class Straggle final : public nn::detail::LayerBase<Straggle> {
 public:
  explicit Straggle(std::chrono::microseconds d) : d_(d) {}
  std::string kind() const override { return "Straggle"; }
  strata::Shape build(const strata::Shape& in) override { return in; }
  void forward(nn::Compute& c, const nn::Act& x, nn::Act& y, const nn::RunInfo& info) override {
    y.resize(c, x.shape());
    c.copy(y.data(), x.data(), x.size() * sizeof(float));
    if (info.training && info.replica == 0) std::this_thread::sleep_for(d_);
  }
  void backward(nn::Compute& c, const nn::Act&, const nn::Act&, const nn::Act& dy, nn::Act* dx) override {
    if (!dx) return;
    dx->resize(c, dy.shape());
    c.copy(dx->data(), dy.data(), dy.size() * sizeof(float));
  }

 private:
  std::chrono::microseconds d_;
};

struct Data {
  Tensor<float> x;
  Tensor<std::int32_t> y;
};
Data synthetic(std::size_t n) {
  Data d{Tensor<float>{{n, 28, 28}}, Tensor<std::int32_t>{{n}}};
  nn::Rng rng{1};
  for (std::size_t i = 0; i < d.x.size(); ++i) d.x[i] = rng.uniform();
  for (std::size_t i = 0; i < n; ++i) d.y[i] = static_cast<std::int32_t>(i % 10);
  return d;
}

// samples/s of fitting `model` under `s` on `steps` batches of `batch` (after one warm-up pass of 20 batches)
template <class S>
double samples_per_s(S& s, nn::Sequential (*make)(), const Data& d, std::size_t batch, std::size_t steps) {
  auto model = s.scope(make);
  model.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  auto ds = s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(batch).repeat());
  model.fit(ds, {.verbose = nn::Verbosity::Silent, .steps_per_epoch = 20});
  const double t0 = bench::now_s();
  model.fit(ds, {.verbose = nn::Verbosity::Silent, .steps_per_epoch = steps});
  return static_cast<double>(steps * batch) / (bench::now_s() - t0);
}

void push_pull(double seconds) {
  std::printf("# 1. pushes/s and pulls/s per server (MNIST MLP variables, 101,770 floats; each op one shard)\n");
  std::printf("%8s %8s %7s %14s %14s %12s\n", "workers", "servers", "shards", "pushes/s/srv", "pulls/s/srv", "GB/s total");
  const std::vector<strata::Shape> shapes{{784, 128}, {128}, {128, 10}, {10}};
  for (int servers : {1, 2, 4})
    for (int workers : {1, 2, 4}) {
      strata::InProcessParameterServers ps{{.workers = 1, .servers = servers}};
      ps.create_variables(shapes, Tensor<float>{{101770}}, [](std::span<float> w, std::span<const float> g, std::size_t, std::uint64_t) {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.001f * g[i];
      });
      const auto& store = ps.store();
      std::atomic<bool> stop{false};
      std::vector<std::thread> ts;
      for (int w = 0; w < workers; ++w)
        ts.emplace_back([&, w] {
          std::vector<float> buf(101770, 0.5f);
          while (!stop) {
            ps.pull(w, buf);
            ps.push(w, buf);
          }
        });
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      stop = true;
      for (auto& t : ts) t.join();
      double pushes = 0, pulls = 0;
      for (int s = 0; s < servers; ++s) {
        pushes += static_cast<double>(store.pushes(s));
        pulls += static_cast<double>(store.pulls(s));
      }
      const double bytes = (pushes + pulls) / static_cast<double>(store.num_shards()) * 101770.0 * 4.0;
      std::printf("%8d %8d %7zu %14.0f %14.0f %12.2f\n", workers, servers, store.num_shards(),
                  pushes / servers / seconds, pulls / servers / seconds, bytes / seconds / 1e9);
    }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  std::string sections = "1,2,3,4";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--seconds") seconds = std::stod(argv[i + 1]);
    else if (k == "--sections") sections = argv[i + 1];
  }
  const auto has = [&](char c) { return sections.find(c) != std::string::npos; };
  if (has('1')) push_pull(seconds);
  const Data d = synthetic(8192);
  const std::size_t batch = 128, steps = 600;
  if (has('2')) {
    std::printf("\n# 2. MNIST MLP training, batch %zu per step, asynchronous, %zu steps\n", batch, steps);
    std::printf("%8s %8s %12s\n", "workers", "servers", "samples/s");
    for (int w : {1, 2, 4}) {
      strata::ParameterServerStrategy ps{{.workers = w, .servers = 2}};
      std::printf("%8d %8d %12.0f\n", w, 2, samples_per_s(ps, mlp, d, batch, steps));
    }
  }
  if (has('3')) {
    // one step's time alone, then a delay of 4x that: the straggler is 5x slower
    strata::ParameterServerStrategy one{{.workers = 1, .servers = 1}};
    const double step_s = static_cast<double>(batch) / samples_per_s(one, mlp, d, batch, 300);
    const auto delay = std::chrono::microseconds(static_cast<long>(4 * step_s * 1e6));
    std::printf("\n# 3. straggler: worker/replica 0 sleeps %lld us per step (a step takes %.0f us: 5x slower)\n",
                static_cast<long long>(delay.count()), step_s * 1e6);
    std::printf("%-34s %8s %14s %14s %8s\n", "training", "workers", "samples/s", "w/ straggler", "kept");
    for (int w : {2, 4}) {
      for (std::optional<std::uint64_t> k : {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{0}}) {
        strata::ParameterServerStrategy fast{{.workers = w, .servers = 2, .staleness = k}};
        const double a = samples_per_s(fast, mlp, d, batch, steps);
        strata::ParameterServerStrategy slow{{.workers = w, .servers = 2, .staleness = k,
                                              .before_step = [&](const strata::WorkerContext& c) {
                                                if (c.worker() == 0) std::this_thread::sleep_for(delay);
                                              }}};
        const double b = samples_per_s(slow, mlp, d, batch, steps);
        std::printf("%-34s %8d %14.0f %14.0f %7.0f%%\n", k ? "parameter server, staleness 0" : "parameter server, asynchronous",
                    w, a, b, 100 * b / a);
      }
      // synchronous mirrored: global batch w x 128, replica 0 sleeps
      strata::MirroredStrategy m{strata::cpu_replicas(w)};
      const double a = samples_per_s(m, mlp, d, batch * static_cast<std::size_t>(w), steps / static_cast<std::size_t>(w));
      static std::chrono::microseconds s_delay;
      s_delay = delay;
      strata::MirroredStrategy m2{strata::cpu_replicas(w)};
      const double b = samples_per_s(
          m2, +[] {
            return nn::Sequential{nn::Input{{28, 28}}, Straggle{s_delay}, nn::Flatten{},
                                  nn::Dense{128, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
          },
          d, batch * static_cast<std::size_t>(w), steps / static_cast<std::size_t>(w));
      std::printf("%-34s %8d %14.0f %14.0f %7.0f%%\n", "mirrored (synchronous all-reduce)", w, a, b, 100 * b / a);
    }
  }
  if (has('4')) {
    const auto dir = strata::data::default_mnist_dir();
    try {
      const auto mn = strata::data::load_mnist(dir);
      std::printf("\n# 4. what staleness costs: MNIST MLP, 4 workers, 2 servers, batch 128, Adam 1e-3, seed 0:\n"
                  "#    test accuracy after one epoch (60,000 samples), mean of 3 runs\n");
      std::printf("%12s %10s %10s\n", "staleness", "accuracy", "loss");
      for (std::optional<std::uint64_t> k : {std::optional<std::uint64_t>{0}, std::optional<std::uint64_t>{1},
                                             std::optional<std::uint64_t>{4}, std::optional<std::uint64_t>{}}) {
        double acc = 0, loss = 0;
        for (int run = 0; run < 3; ++run) {
          strata::ParameterServerStrategy ps{{.workers = 4, .servers = 2, .staleness = k}};
          auto model = ps.scope(mlp);
          model.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}});
          model.fit(ps.distribute(strata::data::from_tensor_slices(mn.train_images, mn.train_labels).shuffle(60000, 0).batch(128)),
                    {.verbose = nn::Verbosity::Silent});
          const auto logs = model.evaluate(strata::data::from_tensor_slices(mn.test_images, mn.test_labels).batch(1000));
          acc += logs.at("accuracy") / 3;
          loss += logs.at("loss") / 3;
        }
        std::printf("%12s %10.4f %10.4f\n", k ? std::to_string(*k).c_str() : "unbounded", acc, loss);
      }
    } catch (const std::exception& e) {
      std::printf("\n# 4. skipped: %s\n", e.what());
    }
  }
}
