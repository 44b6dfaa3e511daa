// ParameterServerStrategy over MPI (run with 1 server + 2 workers at 4
// ranks, 2 servers + 2 workers at 5): staleness 0 matches synchronous
// training, asynchronous training learns and every rank ends with the
// chief's weights, a worker's failure is rescheduled, a step failing
// everywhere stops the chief's fit without hanging the others, bad cluster
// specs fail on every rank; checkpoints hold the servers' optimizer state
// and a fresh job continues them exactly.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/ps/mpi.hpp>
#include <strata/strategy/parameter_server.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"

namespace ps_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::Tensor;

namespace {
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
strata::ClusterSpec spec() { return strata::ClusterSpec::from_counts(world_size() - 3, world_size()); }

using strata_test::Blobs;
using strata_test::blobs;
using strata_test::blobs_mlp;
using strata_test::fit_blobs;
using strata_test::flat_weights;
//! Whether every rank holds the same vector as rank 0.
bool same_everywhere(std::vector<float> v) {
  std::vector<float> root = v;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int same = root == v, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}
}  // namespace

TEST_CASE("staleness 0 across processes trains as synchronous training on W x B batches") {
  const Blobs data = blobs(480, 3);
  strata::MpiParameterServers rt{spec(), {.staleness = 0, .partitioner = strata::FixedShardsPartitioner{.num_shards = 2},
                                          .timeout = 30s}};
  strata::ParameterServerStrategy ps{rt};
  CHECK(ps.num_workers() == 2);
  CHECK(ps.num_servers() == world_size() - 3);
  nn::History h;
  const auto model = fit_blobs(ps, data, 16, 3, &h);
  strata::CentralStorageStrategy sync{strata::cpu_replicas(2)};  // the reference, on every rank
  nn::History hs;
  const auto ref = fit_blobs(sync, data, 32, 3, &hs);
  const auto a = flat_weights(model), b = flat_weights(ref);
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  CHECK(diff < 2e-5);  // every rank: the servers' and workers' fit returned the chief's trained weights
  if (ps.is_chief()) CHECK(h.epochs().back().at("loss") == doctest::Approx(hs.epochs().back().at("loss")).epsilon(1e-4));
  CHECK(same_everywhere(a));
}

TEST_CASE("asynchronous training across processes learns; every rank ends with the chief's weights") {
  const Blobs data = blobs(600, 3), test = blobs(300, 4);
  for (std::optional<std::uint64_t> k : {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{1}}) {
    CAPTURE(k.value_or(99));
    strata::MpiParameterServers rt{spec(), {.staleness = k,
                                            .partitioner = strata::MaxSizePartitioner{.max_shard_bytes = 128},
                                            .timeout = 30s}};
    strata::ParameterServerStrategy ps{rt};
    nn::History h;
    auto model = fit_blobs(ps, data, 16, 12, &h);
    if (ps.is_chief()) {
      CHECK(h.epochs().back().at("loss") < 0.6 * h.epochs().front().at("loss"));
      CHECK(rt.max_observed_gap() <= k.value_or(1000));
      CHECK(rt.failures().empty());
    }
    const auto logs = model.evaluate(strata::data::from_tensor_slices(test.x, test.y).batch(50));
    CHECK(logs.at("accuracy") > 0.85);
    CHECK(same_everywhere(flat_weights(model)));
  }
}

TEST_CASE("a learning rate set at run time cannot reach servers in other processes: the chief's fit says so") {
  const Blobs data = blobs(96, 5);
  strata::MpiParameterServers rt{spec(), {.timeout = 30s}};
  strata::ParameterServerStrategy ps{rt};
  CHECK_FALSE(ps.any().optimizers_in_process());
  auto model = ps.scope(blobs_mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  nn::LearningRateScheduler halve{[](int, float lr) { return lr * 0.5f; }};
  const auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(16);
  const nn::FitOptions opts{.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&halve}};
  if (ps.is_chief())
    CHECK_THROWS_WITH_AS(model.fit(ds, opts), doctest::Contains("servers, in other processes"), strata::Error);
  else
    model.fit(ds, opts);  // serves the chief until its fit ends
}

TEST_CASE("a worker process failing a step is reported to the chief and the step runs on another worker") {
  const Blobs data = blobs(480, 5);
  for (std::optional<std::uint64_t> k : {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{0}}) {
    CAPTURE(k.value_or(99));
    std::atomic<int> seen{0};
    strata::MpiParameterServers rt{
        spec(),
        {.staleness = k,
         .timeout = 30s,
         .on_failure = [&](const strata::WorkerFailure& f) {
           CHECK(f.step == 10);
           CHECK(f.what.find("lost its disk") != std::string::npos);
           ++seen;
         },
         .before_step = [](const strata::WorkerContext& w) {
           if (w.step() == 10 && w.attempt() == 0) throw std::runtime_error("injected: the worker lost its disk");
         }}};
    strata::ParameterServerStrategy ps{rt};
    nn::History h;
    auto model = fit_blobs(ps, data, 16, 2, &h);
    if (ps.is_chief()) {
      CHECK(seen.load() == 1);
      REQUIRE(rt.failures().size() == 1);
      CHECK(model.iterations() == 60);
      CHECK(h.epochs().back().at("loss") < h.epochs().front().at("loss"));
    }
    CHECK(same_everywhere(flat_weights(model)));
  }
}

TEST_CASE("a step that fails on every worker stops the chief's fit; the other ranks return") {
  const Blobs data = blobs(64, 9);
  strata::MpiParameterServers rt{spec(), {.timeout = 30s,
                                          .on_failure = [](const strata::WorkerFailure&) {},
                                          .before_step = [](const strata::WorkerContext& w) {
                                            if (w.step() == 1) throw std::runtime_error("poisoned batch");
                                          }}};
  strata::ParameterServerStrategy ps{rt};
  auto model = ps.scope(blobs_mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  auto ds = ps.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16));
  if (ps.is_chief()) {
    CHECK_THROWS_WITH_AS(model.fit(ds, {.verbose = nn::Verbosity::Silent}), doctest::Contains("poisoned batch"),
                         strata::Error);
    CHECK(rt.failures().size() == 2);
  } else {
    model.fit(ds, {.verbose = nn::Verbosity::Silent});  // returns once the chief ends training
  }
  CHECK(same_everywhere(flat_weights(model)));
}

TEST_CASE("bad cluster specs fail on every rank with the reason") {
  const int n = world_size();
  CHECK_THROWS_WITH_AS((strata::MpiParameterServers{strata::ClusterSpec::parse("chief:0 ps:1 worker:2", 3), {}}),
                       doctest::Contains("has no role"), strata::Error);
  CHECK_THROWS_WITH_AS((void)strata::ClusterSpec::from_counts(n, n), doctest::Contains("ranks"), strata::Error);
  strata::ClusterSpec two_roles = spec();
  two_roles.workers.push_back(two_roles.servers[0]);
  CHECK_THROWS_WITH_AS((strata::MpiParameterServers{two_roles, {}}), doctest::Contains("two roles"), strata::Error);
  (void)world_rank();
}

// Ranks started with different clusters (one with --servers 1, the others
// --servers 2, say) agree on that before anything could wait on a rank that
// plays another part: every rank raises RunMismatch naming the rank and the field.
TEST_CASE("ranks that disagree on the cluster all raise RunMismatch at once, naming the rank and the field") {
  const int n = world_size(), odd = n - 1;
  const int servers = n - 3, other = servers == 1 ? 2 : 1;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string want = "cluster mismatch: rank " + std::to_string(odd) + " has servers " + std::to_string(other);
  CHECK_THROWS_WITH_AS((strata::MpiParameterServers{
                           strata::ClusterSpec::from_counts(world_rank() == odd ? other : servers, n), {.timeout = 30s}}),
                       doctest::Contains(want.c_str()), strata::RunMismatch);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // agreed, not timed out
  // the same disagreement on an option that changes the protocol
  strata::ParameterServerOptions o{.timeout = 30s};
  if (world_rank() == odd) o.staleness = 0;
  const std::string want0 = "rank " + std::to_string(odd) + " has staleness 0, rank 0 has none";
  CHECK_THROWS_WITH_AS((strata::MpiParameterServers{spec(), o}), doctest::Contains(want0.c_str()), strata::RunMismatch);
}

// Every rank of a parameter-server job agrees on the run's fingerprint at
// fit's start: a worker given another batch size stops fit on every rank.
TEST_CASE("a worker started with another batch size stops fit on every rank with RunMismatch naming it") {
  const Blobs data = blobs(64, 5);
  const int odd = world_size() - 1;  // a worker
  strata::MpiParameterServers rt{spec(), {.timeout = 30s}};
  strata::ParameterServerStrategy ps{rt};
  auto model = ps.scope(blobs_mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  const std::size_t batch = world_rank() == odd ? 8 : 16;
  auto ds = ps.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(batch));
  const std::string want = "fingerprint mismatch: rank " + std::to_string(odd) + " has global batch 8, rank 0 has 16";
  CHECK_THROWS_WITH_AS(model.fit(ds, {.verbose = nn::Verbosity::Silent}), doctest::Contains(want.c_str()),
                       strata::RunMismatch);
}

namespace {
namespace fs = std::filesystem;
namespace io = strata::io;
//! What the checkpoint tests train with: Adam, synchronous rounds, 2 shards per variable.
strata::ParameterServerOptions checkpoint_options() {
  return {.staleness = 0, .partitioner = strata::FixedShardsPartitioner{.num_shards = 2}, .timeout = 30s};
}
template <class S>
nn::Sequential adam_mlp(S& s) {
  auto m = s.scope(blobs_mlp);
  m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  m.build(strata::Shape{6});
  return m;
}
template <class S>
void train(nn::Sequential& m, S& s, const Blobs& data, std::size_t batch, int epochs) {
  m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(batch)),
        {.epochs = epochs, .verbose = nn::Verbosity::Silent});
}
//! A directory of the chief's (only the chief reads and writes checkpoints), removed after.
struct ChiefDir {
  fs::path path = fs::temp_directory_path() / ("strata_mpi_ps_ck_" + std::to_string(::getpid()));
  ChiefDir() { fs::create_directories(path); }
  ~ChiefDir() { fs::remove_all(path); }
};
const io::NamedTensor& tensor_of(const io::TensorFile& f, const std::string& name) {
  const io::NamedTensor* t = f.tensor(name);
  REQUIRE(t != nullptr);
  return *t;
}
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
  return d;
}
std::vector<float> values(const io::NamedTensor& t) { return {t.value.begin(), t.value.end()}; }
}  // namespace

// The chief gathers the optimizer state (Adam's moments) and the shard
// versions from the server ranks; a checkpoint of it loads anywhere, and a
// fresh job restoring it (the chief sends it to the servers when training
// starts) continues exactly as the uninterrupted run. Staleness 0 with two
// workers is deterministic (a round's two gradients summed: the order does
// not matter), so the comparison is bitwise.
TEST_CASE("checkpoints across processes hold the servers' optimizer state; a fresh job continues them exactly") {
  const Blobs data = blobs(480, 3);
  const bool chief = world_rank() == spec().chief;
  std::vector<float> two_epochs;
  {
    strata::MpiParameterServers rt{spec(), checkpoint_options()};
    strata::ParameterServerStrategy ps{rt};
    auto m = adam_mlp(ps);
    train(m, ps, data, 16, 2);
    two_epochs = flat_weights(m);
  }
  std::optional<ChiefDir> dir;
  if (chief) dir.emplace();
  const fs::path p = dir ? dir->path / "ps.strata" : fs::path{};
  {
    strata::MpiParameterServers rt{spec(), checkpoint_options()};
    strata::ParameterServerStrategy ps{rt};
    auto m = adam_mlp(ps);
    train(m, ps, data, 16, 1);
    if (!chief) {
      CHECK_THROWS_WITH_AS(m.save_checkpoint("/nonexistent/x.strata"), doctest::Contains("only the chief"),
                           strata::Error);
    } else {
      m.save_checkpoint(p);
      const auto f = io::read_tensor_file(p);
      // (a) a fresh model in one process loads the same weights and optimizer slots
      strata::OneDeviceStrategy one{strata::cpu(0)};
      auto o = adam_mlp(one);
      o.load_checkpoint(p);
      CHECK(flat_weights(o) == flat_weights(m));
      CHECK(o.iterations() == 30);
      o.save_checkpoint(dir->path / "again.strata");
      const auto g = io::read_tensor_file(dir->path / "again.strata");
      for (const char* slot : {"optimizer/0", "optimizer/1"}) {
        CAPTURE(slot);
        const auto &x = tensor_of(f, slot), &y = tensor_of(g, slot);
        REQUIRE(x.value.size() == m.count_params());
        CHECK(std::memcmp(x.value.data(), y.value.data(), x.value.bytes()) == 0);
        double norm = 0;
        for (float v : x.value) norm += std::abs(v);
        CHECK(norm > 0);  // the servers' moments, not the chief's fresh ones
      }
      // the slots and versions are those the same training leaves on servers in one process
      strata::ParameterServerStrategy ip{{.workers = 2, .servers = world_size() - 3, .staleness = std::uint64_t{0},
                                          .partitioner = strata::FixedShardsPartitioner{.num_shards = 2}}};
      auto r = adam_mlp(ip);
      train(r, ip, data, 16, 1);
      r.save_checkpoint(dir->path / "in_process.strata");
      const auto h = io::read_tensor_file(dir->path / "in_process.strata");
      REQUIRE(f.find("update_counters") != nullptr);
      REQUIRE(h.find("update_counters") != nullptr);
      CHECK(*f.find("update_counters") == *h.find("update_counters"));
      CHECK(f.find("update_counters")->starts_with("15,15"));  // 30 batches in rounds of 2, on every shard
      for (const char* slot : {"optimizer/0", "optimizer/1"})
        CHECK(max_diff(values(tensor_of(f, slot)), values(tensor_of(h, slot))) < 1e-6);
      // and the uninterrupted run across processes is that of the servers in one process
      train(r, ip, data, 16, 1);
      CHECK(max_diff(flat_weights(r), two_epochs) < 1e-6);
    }
  }
  // (b) a fresh job: the chief restores before fit, the servers get it when training starts
  strata::MpiParameterServers rt{spec(), checkpoint_options()};
  strata::ParameterServerStrategy ps{rt};
  auto m = adam_mlp(ps);
  if (chief) m.load_checkpoint(p);
  train(m, ps, data, 16, 1);
  if (chief) {
    CHECK(m.iterations() == 60);
    CHECK(rt.shard_versions() == std::vector<std::uint64_t>(rt.shard_versions().size(), 30));  // 15 restored + 15
    CHECK(rt.shard_versions().size() == 12);  // 6 variables, 2 shards each
  }
  CHECK(flat_weights(m) == two_epochs);
}

// A checkpoint written in one process (Mirrored x2: no shard versions) loads
// into the job: its optimizer state reaches the servers, and training on
// matches the parameter servers in one process continuing it.
TEST_CASE("a checkpoint of Mirrored x2 loads into a parameter-server job across processes, optimizer state included") {
  const Blobs data = blobs(480, 3);
  const bool chief = world_rank() == spec().chief;
  std::optional<ChiefDir> dir;
  std::vector<float> ref, weights_only;
  if (chief) {
    dir.emplace();
    strata::MirroredStrategy mir{strata::cpu_replicas(2)};
    auto a = adam_mlp(mir);
    train(a, mir, data, 32, 1);
    a.save_checkpoint(dir->path / "mirrored.strata");
    const auto continued = [&](bool state) {
      strata::ParameterServerStrategy ip{{.workers = 2, .servers = world_size() - 3, .staleness = std::uint64_t{0},
                                          .partitioner = strata::FixedShardsPartitioner{.num_shards = 2}}};
      auto r = adam_mlp(ip);
      if (state) r.load_checkpoint(dir->path / "mirrored.strata");
      else r.load_weights(dir->path / "mirrored.strata");
      train(r, ip, data, 16, 1);
      return flat_weights(r);
    };
    ref = continued(true);
    weights_only = continued(false);
    CHECK(max_diff(ref, weights_only) > 1e-3);  // the optimizer state matters: this test can fail
  }
  strata::MpiParameterServers rt{spec(), checkpoint_options()};
  strata::ParameterServerStrategy ps{rt};
  auto m = adam_mlp(ps);
  if (chief) m.load_checkpoint(dir->path / "mirrored.strata");
  train(m, ps, data, 16, 1);
  if (chief) {
    CHECK(m.iterations() == 45);  // 15 steps under Mirrored, 30 here
    CHECK(max_diff(flat_weights(m), ref) < 1e-6);
  }
  CHECK(same_everywhere(flat_weights(m)));
}

}  // namespace ps_test
