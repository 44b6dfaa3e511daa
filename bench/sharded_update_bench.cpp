// The sharded Mirrored update (ZeRO stage 1) against the unsharded one:
// (1) the update alone, over the MNIST MLP's 101,770 parameters with Adam:
//     all-reduce + whole update on every replica, against reduce-scatter +
//     1/p of the update + all-gather; (2) whole training steps of the MLP
//     (synthetic MNIST-shaped data, global batch 128 and 1024), samples/s.
// (3) the fixed per-step cost of p replicas: an empty run(), and a run()
//     with one 4-byte all-reduce (what every step pays whatever its work),
//     at p up to more replicas than cores.
// (4) the fixed cost of a fit step (a one-weight model, one row per replica:
//     nothing but the step's round trips) one step at a time and with
//     CompileOptions::steps_per_execution 64, where the replicas run 64 steps
//     to one run.
// Every figure is the median of --runs runs.
//   ./build/bench/sharded_update_bench [--replicas 1,2,4] [--runs 5]
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "bench_util.hpp"

namespace nn = strata::nn;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds per update of n parameters on p replicas (sharded or not).
double update_us(int p, bool sharded, std::size_t n, int reps) {
  strata::MirroredStrategy s{strata::cpu_replicas(p)};
  const nn::Adam adam{1e-3};
  std::vector<std::vector<float>> w(static_cast<std::size_t>(p), std::vector<float>(n, 0.5f)),
      g(static_cast<std::size_t>(p), std::vector<float>(n, 1e-3f));
  std::vector<nn::OptimizerState> st;
  std::vector<std::vector<float>> shard(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    const auto m = strata::shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r));
    st.push_back(adam.make_state(sharded ? m.size() : n));
    shard[static_cast<std::size_t>(r)].resize(m.size());
  }
  std::int64_t step = 0;
  const auto once = [&] {
    s.run([&](auto& ctx) {
      const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
      std::span<float> wr(w[r]), gr(g[r]);
      if (sharded) {  // what the mirrored executor runs
        strata::detail::sharded_update(ctx, wr, gr, shard[r], strata::shard_range(n, static_cast<std::size_t>(p), r),
                                       [&](std::span<float> w, std::span<const float> gs) {
                                         adam.apply(w, gs, st[r], 0, step);
                                       });
      } else {
        ctx.all_reduce(gr, strata::Sum);
        adam.apply(wr, gr, st[r], 0, step);
      }
    });
    ++step;
  };
  for (int i = 0; i < 20; ++i) once();  // warm up
  const double t0 = bench::now_s();
  for (int i = 0; i < reps; ++i) once();
  return (bench::now_s() - t0) / reps * 1e6;
}

// Samples/s of the MNIST MLP trained on `rows` synthetic rows at `batch`.
double train_rate(int p, bool sharded, std::size_t batch, std::size_t rows) {
  strata::MirroredStrategy s{strata::cpu_replicas(p)};
  s.executor_options().sharded_update = sharded ? strata::ShardedUpdate::On : strata::ShardedUpdate::Off;
  strata::Tensor<float> x{{rows, 28, 28}};
  strata::Tensor<std::int32_t> y{{rows}};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 255) / 255.f;
  for (std::size_t i = 0; i < rows; ++i) y[i] = static_cast<std::int32_t>(i % 10);
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}},
                          nn::Dense{10}};
  });
  model.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}});
  auto ds = s.distribute(strata::data::from_tensor_slices(x, y).batch(batch));
  model.fit(ds, {.epochs = 1, .verbose = nn::Verbosity::Silent});  // warm up (build, first touch)
  const double t0 = bench::now_s();
  model.fit(ds, {.epochs = 2, .verbose = nn::Verbosity::Silent});
  return 2.0 * static_cast<double>(rows) / (bench::now_s() - t0);
}

// Microseconds per run() of p replicas doing nothing, or one tiny all-reduce.
double overhead_us(int p, bool reduce, int reps) {
  strata::MirroredStrategy s{strata::cpu_replicas(p)};
  const auto once = [&] {
    s.run([&](auto& ctx) {
      if (reduce) {
        float v[1] = {1.f};
        ctx.all_reduce(std::span<float>(v), strata::Sum);
      }
    });
  };
  for (int i = 0; i < 50; ++i) once();
  const double t0 = bench::now_s();
  for (int i = 0; i < reps; ++i) once();
  return (bench::now_s() - t0) / reps * 1e6;
}

// Microseconds per fit step of a one-weight model, one row per replica, `n` steps to an execution.
double fit_step_us(int p, std::size_t n, std::size_t steps) {
  strata::MirroredStrategy s{strata::cpu_replicas(p)};
  const auto rows = static_cast<std::size_t>(p) * steps;
  strata::Tensor<float> x{{rows, 1}}, y{{rows, 1}};
  for (std::size_t i = 0; i < rows; ++i) x[i] = y[i] = static_cast<float>(i % 7) / 7.f;
  auto model = s.scope([] { return nn::Sequential{nn::Input{{1}}, nn::Dense{1}}; });
  model.compile(nn::SGD{1e-3}, nn::MeanSquaredError{}, {}, {.steps_per_execution = n});
  auto ds = s.distribute(strata::data::from_tensor_slices(x, y).batch(static_cast<std::size_t>(p)));
  model.fit(ds, {.verbose = nn::Verbosity::Silent, .steps_per_epoch = 64});  // warm up
  const double t0 = bench::now_s();
  model.fit(ds, {.verbose = nn::Verbosity::Silent});
  return (bench::now_s() - t0) / static_cast<double>(steps) * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  // Each synthetic batch is a fresh 401 KiB tensor; whether glibc serves it
  // from fresh pages (page faults + zeroing: up to 40% of a step) depends on
  // what the process freed before (docs/performance.md, train_bench). Pin the
  // allocator so that the comparison measures the update, not that.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  std::vector<int> replicas{1, 2, 4};
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--replicas") replicas = bench::parse_ints(argv[i + 1]);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: sharded_update_bench [--replicas 1,2,4] [--runs 5]\n");
      return 2;
    }
  }
  std::printf("# The fixed cost of a step: run() of p replicas (median of %d runs of 2000)\n", runs);
  std::printf("%9s %16s %22s\n", "replicas", "empty run(us)", "run+all_reduce(us)");
  for (int p : {1, 2, 4, 8, 16}) {
    std::vector<double> a, b;
    for (int r = 0; r < runs; ++r) {
      a.push_back(overhead_us(p, false, 2000));
      b.push_back(overhead_us(p, true, 2000));
    }
    std::printf("%9d %16.1f %22.1f\n", p, median(a), median(b));
  }
  std::printf("\n# The fixed cost of a fit step: a one-weight model, one row per replica (median of %d fits of 2048 steps)\n",
              runs);
  std::printf("%9s %18s %24s %9s\n", "replicas", "1 step/run(us)", "64 steps/execution(us)", "speedup");
  for (int p : {1, 2, 4, 8, 16}) {
    std::vector<double> a, b;
    for (int r = 0; r < runs; ++r) {
      a.push_back(fit_step_us(p, 1, 2048));
      b.push_back(fit_step_us(p, 64, 2048));
    }
    std::printf("%9d %18.1f %24.1f %8.2fx\n", p, median(a), median(b), median(a) / median(b));
  }
  std::printf("\n");
  const std::size_t n = 784 * 128 + 128 + 128 * 10 + 10;  // the MNIST MLP's parameters
  std::printf("# The Adam update of %zu parameters (median of %d runs of 200 updates)\n", n, runs);
  std::printf("%9s %16s %16s %9s\n", "replicas", "unsharded(us)", "sharded(us)", "speedup");
  for (int p : replicas) {
    std::vector<double> a, b;
    for (int r = 0; r < runs; ++r) {
      a.push_back(update_us(p, false, n, 200));
      b.push_back(update_us(p, true, n, 200));
    }
    std::printf("%9d %16.1f %16.1f %8.2fx\n", p, median(a), median(b), median(a) / median(b));
  }
  std::printf("\n# MNIST MLP training, synthetic data (median of %d runs of 2 epochs of 12,800 rows)\n", runs);
  std::printf("%9s %7s %18s %18s %9s\n", "replicas", "batch", "unsharded(sam/s)", "sharded(sam/s)", "ratio");
  for (std::size_t batch : {std::size_t{128}, std::size_t{1024}})
    for (int p : replicas) {
      std::vector<double> a, b;
      for (int r = 0; r < runs; ++r) {
        a.push_back(train_rate(p, false, batch, 12800));
        b.push_back(train_rate(p, true, batch, 12800));
      }
      std::printf("%9d %7zu %18.0f %18.0f %8.2fx\n", p, batch, median(a), median(b), median(b) / median(a));
    }
}
