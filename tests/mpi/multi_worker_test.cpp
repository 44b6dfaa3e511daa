// MultiWorkerMirroredStrategy under mpirun: hierarchical collectives over
// workers × local replicas, variables from worker 0, failures reaching
// every worker, and a model trained across workers matching the same model
// trained in one process on the same global batches.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strategy/multi_worker.hpp>

#include <unistd.h>

#include "device/host_as_gpu.hpp"
#include "support/quick_workers.hpp"

namespace multi_worker_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

namespace {
using strata_test::quick_workers;
strata::MultiWorkerOptions quick(std::chrono::milliseconds t = 20s) { return quick_workers(t); }
//! 96 samples of 6 features, 3 classes learnable from the first feature (the same on every worker).
std::pair<strata::Tensor<float>, strata::Tensor<std::int32_t>> samples_96() {
  strata::Tensor<float> x{{96, 6}};
  strata::Tensor<std::int32_t> y{{96}};
  for (std::size_t i = 0; i < 96; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = static_cast<float>(((i * 5 + j * 7) % 13)) / 13.f - 0.5f;
    y[i] = x[i * 6] < -0.17f ? 0 : x[i * 6] < 0.17f ? 1 : 2;
  }
  return {std::move(x), std::move(y)};
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
}  // namespace

TEST_CASE("hierarchical all_reduce over workers x local replicas, every element count") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), quick()};
  const int P = s.num_replicas_in_sync();
  REQUIRE(P == 2 * s.num_workers());
  CHECK(s.first_local_replica() == 2 * s.worker_index());
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1001}, std::size_t{300001}}) {
    CAPTURE(n);
    auto ids = s.run([&](strata::MultiWorkerReplicaContext& ctx) {
      const int g = ctx.replica_id_in_sync_group();
      std::vector<double> sum(n, g + 1.0), mean(n, g + 1.0), mx(n, g + 1.0);
      ctx.all_reduce(sum, strata::Sum);
      ctx.all_reduce(mean, strata::Mean);
      ctx.all_reduce(mx, strata::Max);
      for (std::size_t i = 0; i < n; ++i) {
        if (sum[i] != P * (P + 1) / 2.0 || mean[i] != (P + 1) / 2.0 || mx[i] != P)
          throw std::runtime_error("wrong at " + std::to_string(i) + ": " + std::to_string(sum[i]));
      }
      return g;
    });
    CHECK(s.local_results(ids)[0] == s.first_local_replica());
    CHECK(s.local_results(ids)[1] == s.first_local_replica() + 1);
  }
  CHECK(s.reduce(strata::Sum, s.run([](auto& ctx) { return ctx.replica_id_in_sync_group(); })) == P * (P - 1) / 2);
}

TEST_CASE("workers may run different numbers of replicas; broadcast from every global replica") {
  const int me = world_rank();
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(me == 0 ? 2 : 1), quick()};
  const int P = s.num_replicas_in_sync();
  CHECK(P == s.num_workers() + 1);
  for (int root = 0; root < P; ++root) {
    s.run([&](auto& ctx) {
      std::vector<float> v(257, ctx.replica_id_in_sync_group() == root ? 7.f + root : -1.f);
      ctx.broadcast(v, root);
      if (v[0] != 7.f + root || v[256] != 7.f + root) throw std::runtime_error("broadcast from " + std::to_string(root));
      ctx.barrier();
    });
  }
  CHECK(s.reduce(strata::Mean, s.run([](auto& ctx) { return 1.0 * ctx.replica_id_in_sync_group(); })) ==
        doctest::Approx((P - 1) / 2.0));
}

TEST_CASE("variables start from worker 0's values on every replica of every worker") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), quick()};
  strata::Tensor<float> init{{3}};
  init.fill(static_cast<float>(10 + s.worker_index()));
  auto v = s.make_variable(init);
  v.check_in_sync();
  CHECK(v.copy(1)[2] == 10.f);
}

TEST_CASE("workers that disagree all raise; the strategy stays usable") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), quick()};
  try {
    s.run([&](auto& ctx) {
      std::vector<float> g(ctx.worker_index() == 0 ? 10 : 11, 1.f);
      ctx.all_reduce(g, strata::Sum);
    });
    FAIL_CHECK("no error");
  } catch (const strata::ReplicaError& e) {
    CHECK(std::string(e.what()).find("element counts differ") != std::string::npos);
    CHECK_THROWS_AS(e.rethrow_cause(), strata::CollectiveMismatch);
  }
  auto r = s.run([](auto& ctx) {
    std::vector<float> g(4, 1.f);
    ctx.all_reduce(g, strata::Sum);
    return g[3];
  });
  CHECK(s.local_results(r)[1] == static_cast<float>(s.num_replicas_in_sync()));
}

TEST_CASE("a replica that throws on one worker brings every worker's run down with its message") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), quick(20s)};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    s.run([&](auto& ctx) {
      if (ctx.worker_index() == 1 && ctx.local_replica_id() == 1) throw std::runtime_error("boom on purpose");
      std::vector<float> g(1000, 1.f);
      ctx.all_reduce(g, strata::Sum);
    });
    FAIL_CHECK("no error");
  } catch (const strata::ReplicaError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("boom on purpose") != std::string::npos);
    if (s.worker_index() == 1) CHECK(e.replica() == 3);  // the global id of worker 1's replica 1
    else CHECK(msg.find("worker 1") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // the notice, not the timeout
  CHECK(!s.communicator().poisoned().empty());
}

TEST_CASE("a worker that never reaches the collective is named by the others within the timeout") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), quick(500ms)};
  if (s.worker_index() != 1) {
    try {
      s.run([&](auto& ctx) { ctx.barrier(); });
      FAIL_CHECK("no error");
    } catch (const strata::ReplicaError& e) {
      const std::string msg = e.what();
      CHECK(msg.find("timed out after 500 ms") != std::string::npos);
      CHECK(msg.find("1") != std::string::npos);
      CHECK(msg.find("never arrived") != std::string::npos);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a model trained across workers matches the same model trained in one process") {
  namespace nn = strata::nn;
  // 96 samples of 6 features, 3 classes; the same on every worker
  strata::Tensor<float> x{{96, 6}};
  strata::Tensor<std::int32_t> y{{96}};
  for (std::size_t i = 0; i < 96; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = static_cast<float>(((i * 7 + j * 3) % 11)) / 11.f - 0.5f;
    const float x0 = x[i * 6];
    y[i] = x0 < -0.17f ? 0 : x0 < 0.17f ? 1 : 2;  // learnable from the first feature
  }
  auto train = [&](auto& strategy) {
    // a fresh pipeline: iterating one again would continue its reshuffling
    auto data = strata::data::from_tensor_slices(x, y).shuffle(96, 3).batch(20);  // last batch 16 rows
    auto model = strategy.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dropout{0.2f},
                            nn::Dense{3}};
    });
    model.compile(nn::Adam{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                  {.seed = 5});
    auto h = model.fit(strategy.distribute(data), {.epochs = 8, .verbose = nn::Verbosity::Silent});
    auto logs = model.evaluate(strategy.distribute(data), {.verbose = nn::Verbosity::Silent});
    return std::tuple{model.get_weights(), h.epochs().back().at("loss"), logs.at("accuracy")};
  };
  strata::MultiWorkerMirroredStrategy multi{strata::cpu_replicas(2), quick()};
  strata::MirroredStrategy one{strata::cpu_replicas(multi.num_replicas_in_sync())};
  auto [w_multi, loss_multi, acc_multi] = train(multi);
  auto [w_one, loss_one, acc_one] = train(one);
  CHECK(loss_multi == doctest::Approx(loss_one).epsilon(1e-5));
  CHECK(acc_multi > 0.5);  // it learned something: the comparison is not between two untrained models
  CHECK(acc_multi == doctest::Approx(acc_one));
  REQUIRE(w_multi.size() == w_one.size());
  for (std::size_t t = 0; t < w_one.size(); ++t)
    for (std::size_t i = 0; i < w_one[t].value.size(); ++i)
      REQUIRE(w_multi[t].value[i] == doctest::Approx(w_one[t].value[i]).epsilon(2e-5));
}

// GPU replicas across workers (issue 13): hierarchical, as the CPU workers'
// all-reduce: each worker's replicas sum on their devices, local replica 0
// sums that across workers (here staged through host memory over MPI: no
// NCCL in this program), and the others take its result on their devices.
// On the host's compute in place of the GPUs' it is the CPU replicas' run,
// bit for bit, with 1 and 2 replicas per worker.
TEST_CASE("GPU replicas across workers (host-staged), on the host compute, train bitwise like CPU replicas") {
  namespace nn = strata::nn;
  const auto samples = samples_96();
  const auto& x = samples.first;
  const auto& y = samples.second;
  std::string how;
  auto train = [&](auto& strategy) {
    auto data = strata::data::from_tensor_slices(x, y).shuffle(96, 3).batch(20);
    auto model = strategy.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                            nn::Dropout{0.2f}, nn::Dense{3}};
    });
    model.compile(nn::Adam{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                  {.seed = 5});
    auto h = model.fit(strategy.distribute(data), {.epochs = 4, .verbose = nn::Verbosity::Silent});
    how = model.gradient_reduction();
    std::vector<float> w;
    for (const auto& t : model.get_weights()) w.insert(w.end(), t.value.begin(), t.value.end());
    const double acc = model.evaluate(strategy.distribute(data), {.verbose = nn::Verbosity::Silent}).at("accuracy");
    return std::tuple{w, h.epochs().back().at("loss"), acc};
  };
  for (int local : {1, 2}) {
    CAPTURE(local);
    strata::MultiWorkerMirroredStrategy cpus{strata::cpu_replicas(local), quick()};
    auto [w_cpu, loss_cpu, acc_cpu] = train(cpus);
    CHECK(how.empty());  // CPU replicas: the reduce policy decides, nothing at run time
    strata_test::HostAsGpu host;
    strata::MultiWorkerMirroredStrategy gpus{strata::virtual_gpus(0, local), quick()};
    auto [w_gpu, loss_gpu, acc_gpu] = train(gpus);
    CHECK(w_gpu == w_cpu);
    CHECK(loss_gpu == loss_cpu);
    CHECK(acc_gpu == acc_cpu);
    CHECK(how.find("; across workers: NCCL across workers is not in this program (include <strata/nccl_mpi.hpp>") !=
          std::string::npos);
  }
  CHECK_THROWS_WITH_AS(strata::MultiWorkerMirroredStrategy({strata::gpu(0), strata::cpu(0)}, quick()),
                       doctest::Contains("a strategy's replicas are all GPUs or all CPUs"), strata::Error);
}

namespace {
// A file of n samples: n, then n x 6 floats, then n int32 labels.
void write_samples(const std::filesystem::path& p, std::size_t first, std::size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), sizeof n);
  std::vector<float> x(n * 6);
  std::vector<std::int32_t> y(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = static_cast<float>(((first + i) * 7 + j * 3) % 11) / 11.f - 0.5f;
    y[i] = x[i * 6] < -0.17f ? 0 : x[i * 6] < 0.17f ? 1 : 2;
  }
  f.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  f.write(reinterpret_cast<const char*>(y.data()), static_cast<std::streamsize>(y.size() * sizeof(std::int32_t)));
}
auto read_samples(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::size_t n = 0;
  f.read(reinterpret_cast<char*>(&n), sizeof n);
  strata::Tensor<float> x{{n, 6}};
  strata::Tensor<std::int32_t> y{{n}};
  f.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  f.read(reinterpret_cast<char*>(y.data()), static_cast<std::streamsize>(y.size() * sizeof(std::int32_t)));
  if (!f) throw std::runtime_error("truncated sample file " + p.string());
  return strata::data::from_tensor_slices(std::move(x), std::move(y));
}
//! W + 1 files of 40 samples in a fresh directory named after `name` (worker 0 writes them, every worker
//! waits for it): sharded by file, worker 0 reads two, the others one. remove() once every worker is done.
struct SampleFiles {
  std::filesystem::path dir;
  std::vector<std::filesystem::path> files;
  int worker = 0;
  SampleFiles(const std::string& name, int W, int w) : worker(w) {
    long id = ::getpid();
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    dir = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(id));
    for (int f = 0; f <= W; ++f) files.push_back(dir / ("part" + std::to_string(f)));
    if (w == 0) {
      std::filesystem::create_directories(dir);
      for (std::size_t f = 0; f < files.size(); ++f) write_samples(files[f], f * 40, 40);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  void remove() const {
    MPI_Barrier(MPI_COMM_WORLD);
    if (worker == 0) std::filesystem::remove_all(dir);
  }
};
}  // namespace

TEST_CASE("a dataset read from several files is sharded by file: each worker reads its own files, uneven shares") {
  namespace nn = strata::nn;
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2), quick()};
  const int W = s.num_workers(), w = s.worker_index();
  const SampleFiles samples("strata_mw_files", W, w);  // worker 0 gets two files, the others one
  const std::size_t nfiles = samples.files.size();
  std::set<std::string> read;
  auto data = strata::data::from_files(samples.files, [&](const std::filesystem::path& p) {
    read.insert(p.filename().string());
    return read_samples(p);
  });
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dense{3}};
  });
  model.compile(nn::Adam{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}});
  auto h = model.fit(s.distribute(data.shuffle(100, 1).batch(16)), {.epochs = 6, .verbose = nn::Verbosity::Silent});
  // each worker read exactly its files: w, w + W, ...
  std::set<std::string> mine;
  for (std::size_t f = static_cast<std::size_t>(w); f < nfiles; f += static_cast<std::size_t>(W))
    mine.insert("part" + std::to_string(f));
  CHECK(read == mine);
  // the workers stayed in step (one has more batches) and hold the same weights
  auto weights = model.get_weights()[0].value;
  std::vector<float> chief(weights.span().begin(), weights.span().end());
  MPI_Bcast(chief.data(), static_cast<int>(chief.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  CHECK(std::equal(chief.begin(), chief.end(), weights.span().begin()));
  const auto losses = h.at("loss");
  CHECK(losses.back() < losses.front());
  // evaluate covers every worker's files and agrees everywhere; predict gives this worker's rows
  const auto logs = model.evaluate(s.distribute(data.batch(32)), {.verbose = nn::Verbosity::Silent});
  double acc[1] = {logs.at("accuracy")}, first[1] = {acc[0]};
  MPI_Bcast(first, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  CHECK(acc[0] == first[0]);
  CHECK(acc[0] > 0.5);
  CHECK(model.predict(s.distribute(data.batch(32).map([](strata::Tensor<float> x, strata::Tensor<std::int32_t>) {
                 return x;
               }))).shape()[0] == 40 * mine.size());
  samples.remove();
}

// CompileOptions::steps_per_execution across workers: each worker's replicas
// run N steps in one run (their collectives crossing the workers step by
// step), the workers' hooks once per execution; by file, one sum of the N
// batches' rows agrees on the global batches. The same bits as one step at a time.
TEST_CASE("steps_per_execution across workers: one step at a time's weights and logs, auto-sharded and by file; "
          "GPU replicas (stand-ins) give the CPU replicas' bits") {
  namespace nn = strata::nn;
  strata::MultiWorkerMirroredStrategy cpus{strata::cpu_replicas(2), quick()};
  std::optional<strata::MultiWorkerMirroredStrategy> gpus;
  strata::MultiWorkerMirroredStrategy* on = &cpus;
  const SampleFiles samples("strata_mw_spe", cpus.num_workers(), cpus.worker_index());  // uneven shares
  const auto xy = samples_96();
  struct Got {
    std::vector<float> w;
    std::vector<double> loss;
    double eval = 0;
    std::int64_t steps = 0;
  };
  const auto run = [&](std::size_t n, bool by_file) {
    auto& s = *on;
    auto model = s.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dense{3}};
    });
    model.compile(nn::Adam{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                  {.seed = 3, .steps_per_execution = n});
    Got g;
    if (by_file) {
      auto data = strata::data::from_files(samples.files, [](const std::filesystem::path& p) { return read_samples(p); });
      g.loss = model.fit(s.distribute(data.batch(8)), {.epochs = 2, .verbose = nn::Verbosity::Silent}).at("loss");
      g.eval = model.evaluate(s.distribute(data.batch(12)), {.verbose = nn::Verbosity::Silent}).at("loss");
    } else {
      auto data = strata::data::from_tensor_slices(xy.first, xy.second);
      g.loss = model.fit(s.distribute(data.batch(8)), {.epochs = 2, .verbose = nn::Verbosity::Silent}).at("loss");
      g.eval = model.evaluate(s.distribute(data.batch(12)), {.verbose = nn::Verbosity::Silent}).at("loss");
    }
    for (const auto& t : model.get_weights()) g.w.insert(g.w.end(), t.value.begin(), t.value.end());
    g.steps = model.iterations();
    return g;
  };
  std::vector<Got> cpu_runs;
  for (bool by_file : {false, true}) {
    CAPTURE(by_file);
    const Got one = run(1, by_file);
    const Got three = run(3, by_file);  // 12 (or 10) batches an epoch: executions of 3 and a shorter last
    CHECK(three.steps == one.steps);
    CHECK(three.w == one.w);
    CHECK(three.loss == one.loss);
    CHECK(three.eval == one.eval);
    cpu_runs.push_back(three);
  }
  {  // GPU replicas on stand-ins: the device executor's executions of 3, the CPU replicas' bits
    strata_test::HostAsGpu host;
    gpus.emplace(strata::virtual_gpus(0, 2), quick());
    on = &*gpus;
    for (bool by_file : {false, true}) {
      CAPTURE(by_file);
      const Got three = run(3, by_file);
      const Got& cpu = cpu_runs[by_file ? 1 : 0];
      CHECK(three.steps == cpu.steps);
      CHECK(three.w == cpu.w);
      CHECK(three.loss == cpu.loss);
      CHECK(three.eval == cpu.eval);
    }
    gpus.reset();
  }
  samples.remove();
}

// The run fingerprint: a worker started with another global batch, seed,
// learning rate, model, dataset size or steps_per_execution stops fit on every worker with a RunMismatch that
// names it and the field, instead of training something else silently.
TEST_CASE("workers that disagree on the run's fingerprint all raise RunMismatch naming the rank and the field") {
  namespace nn = strata::nn;
  strata::Tensor<float> x{{40, 4}};
  strata::Tensor<std::int32_t> y{{40}};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) * 0.1f;
  for (std::size_t i = 0; i < 40; ++i) y[i] = static_cast<std::int32_t>(i % 2);
  strata::MultiWorkerMirroredStrategy s{{strata::cpu(0)}, quick()};
  const int odd = s.num_workers() - 1;  // the worker started differently
  const bool me = s.worker_index() == odd;
  struct Case {
    const char* field;
    std::size_t batch = 8, units = 4;
    std::uint64_t seed = 5;
    double lr = 1e-2;
    std::size_t rows = 40;  // the dataset's size (rows 32: 4 batches of 8 instead of 5)
    std::size_t spe = 1;    // steps per execution: the callbacks' (and their collectives') rhythm
  };
  const Case base{"none"};
  for (Case c : {Case{"global batch", 16}, Case{"seed", 8, 4, 6}, Case{"optimizer", 8, 4, 5, 0.02},
                 Case{"parameter count", 8, 5}, Case{"batches per epoch", 8, 4, 5, 1e-2, 32},
                 Case{"steps per execution", 8, 4, 5, 1e-2, 40, 2}}) {
    CAPTURE(c.field);
    const Case& mine = me ? c : base;
    std::string what;
    try {
      auto model = s.scope([&] { return nn::Sequential{nn::Input{{4}}, nn::Dense{mine.units}, nn::Dense{2}}; });
      model.compile(nn::SGD{mine.lr}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {},
                    {.seed = mine.seed, .steps_per_execution = mine.spe});
      model.fit(s.distribute(strata::data::from_tensor_slices(x, y).take(mine.rows).batch(mine.batch)),
                {.epochs = 1, .verbose = nn::Verbosity::Silent});
    } catch (const strata::RunMismatch& e) {
      what = e.what();
    }
    CAPTURE(what);
    CHECK(what.find("fingerprint mismatch: rank " + std::to_string(odd) + " has " + c.field) != std::string::npos);
  }
  // the same run everywhere trains, and the strategy is still usable after the mismatches
  auto model = s.scope([] { return nn::Sequential{nn::Input{{4}}, nn::Dense{4}, nn::Dense{2}}; });
  model.compile(nn::SGD{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 5});
  const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(x, y).batch(8)),
                           {.epochs = 1, .verbose = nn::Verbosity::Silent});
  CHECK(h.epochs().size() == 1);
}

TEST_CASE("checkpoints are logical across processes: one process's Mirrored x4 <-> 2 workers x 2 replicas") {
  namespace nn = strata::nn;
  const auto samples = samples_96();
  const auto& x = samples.first;
  const auto& y = samples.second;
  auto make = [](auto& strategy) {
    auto model = strategy.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dense{3}};
    });
    model.compile(nn::Adam{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 9});
    return model;
  };
  auto data = [&] { return strata::data::from_tensor_slices(x, y).batch(24); };
  auto flat = [](const nn::Sequential& m) {
    std::vector<float> v;
    for (const auto& w : m.get_weights()) v.insert(v.end(), w.value.begin(), w.value.end());
    return v;
  };
  // one file name for the job: rank 0's pid
  long pid = world_rank() == 0 ? static_cast<long>(::getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const auto dir = std::filesystem::temp_directory_path();
  const auto one_path = dir / ("strata_mw_ckpt_one_" + std::to_string(pid) + ".strata");
  const auto multi_path = dir / ("strata_mw_ckpt_multi_" + std::to_string(pid) + ".strata");

  // every rank trains the same in one process; rank 0 writes its checkpoint
  strata::MirroredStrategy one{strata::cpu_replicas(4)};
  auto a = make(one);
  a.fit(one.distribute(data()), {.epochs = 2, .verbose = nn::Verbosity::Silent});
  if (world_rank() == 0) a.save_checkpoint(one_path);
  MPI_Barrier(MPI_COMM_WORLD);

  // made after the world's own collectives and a training run in one process
  strata::MultiWorkerMirroredStrategy multi{strata::cpu_replicas(2), quick()};
  auto b = make(multi);
  b.build(strata::Shape{6});
  b.load_checkpoint(one_path);
  CHECK(flat(b) == flat(a));
  CHECK(b.iterations() == a.iterations());
  // one more epoch each, from the same state (optimizer moments included): the same model
  a.fit(one.distribute(data()), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  b.fit(multi.distribute(data()), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  const auto wa = flat(a), wb = flat(b);
  REQUIRE(wa.size() == wb.size());
  for (std::size_t i = 0; i < wa.size(); ++i) REQUIRE(wb[i] == doctest::Approx(wa[i]).epsilon(2e-5));

  // and back: the workers' checkpoint loads in one process
  if (world_rank() == 0) b.save_checkpoint(multi_path);
  MPI_Barrier(MPI_COMM_WORLD);
  strata::OneDeviceStrategy single{strata::cpu(0)};
  auto c = make(single);
  c.build(strata::Shape{6});
  c.load_checkpoint(multi_path);
  CHECK(flat(c) == wb);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    std::filesystem::remove(one_path);
    std::filesystem::remove(multi_path);
  }
}

TEST_CASE("BackupAndRestore across workers: the chief owns the directory, its refusal reaches every worker") {
  namespace nn = strata::nn;
  const auto samples = samples_96();
  auto make = [](auto& strategy, std::uint64_t seed) {
    auto model = strategy.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dense{3}};
    });
    model.compile(nn::Adam{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = seed});
    return model;
  };
  auto data = [&] { return strata::data::from_tensor_slices(samples.first, samples.second).batch(24); };
  long pid = world_rank() == 0 ? static_cast<long>(::getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const auto dir = std::filesystem::temp_directory_path() / ("strata_mw_backup_" + std::to_string(pid));
  strata::MultiWorkerMirroredStrategy multi{strata::cpu_replicas(1), quick()};
  {
    nn::BackupAndRestore b{dir, {.delete_at_end = false}};
    auto m = make(multi, 9);
    m.fit(multi.distribute(data()), {.epochs = 1, .verbose = nn::Verbosity::Silent, .callbacks = {&b}});
  }  // its checkpoint (step 4) stays; the lock is released
  {
    nn::BackupAndRestore b{dir};
    auto m = make(multi, 10);  // another seed: another run
    std::string msg;
    try {
      m.fit(multi.distribute(data()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&b}});
    } catch (const nn::CheckpointDirectoryError& e) {
      msg = e.what();
    }
    if (world_rank() == 0) CHECK(msg.find("seed: 9 there, 10 here") != std::string::npos);
    else CHECK(msg.find("the chief (worker 0) refused the checkpoint directory") != std::string::npos);
  }
  nn::BackupAndRestore b{dir};
  auto m = make(multi, 9);
  m.fit(multi.distribute(data()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&b}});
  CHECK(b.resumed_from() == 4);  // on every worker
  CHECK(m.iterations() == 8);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    CHECK((!std::filesystem::exists(dir) || std::filesystem::is_empty(dir)));  // done: its files went
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
}

// The dispatch point (parallel/dispatch.hpp) refuses across workers what it refuses in one process: captured
// steps (OneDeviceStrategy on a GPU only; ignored before, when the strategy's own make_executor bypassed the
// refusals), and a model is made with the option off.
TEST_CASE("across workers, capture_steps is refused in the sentence one process gives") {
  namespace nn = strata::nn;
  auto make = [] { return nn::Sequential{nn::Input{{4}}, nn::Dense{2}}; };
  {
    strata::MultiWorkerMirroredStrategy s{{strata::cpu(0)}, quick()};
    s.executor_options().capture_steps = true;
    CHECK_THROWS_WITH_AS(s.scope(make), doctest::Contains("captured steps run under OneDeviceStrategy on a GPU"),
                         strata::Error);
  }
  strata::MultiWorkerMirroredStrategy s{{strata::cpu(0)}, quick()};
  CHECK_NOTHROW(s.scope(make));
}

}  // namespace multi_worker_test
