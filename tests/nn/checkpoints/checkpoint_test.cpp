// Checkpoints (issue 15): the checksum, the file container and every way a
// file can be bad, weights files, checkpoints loading under any strategy,
// BackupAndRestore resuming bitwise, preemption, a writer killed mid-write.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <strata/core/crc32c.hpp>
#include <strata/data/dataset.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/nn.hpp>
#include <strata/nn/callbacks/backup_and_restore.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

#include "support/blobs.hpp"
#include "support/checkpoint_files.hpp"
#include "device/host_as_gpu.hpp"
#include "strategy/strategy_sweep.hpp"

namespace checkpoint_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace fs = std::filesystem;
namespace nn = strata::nn;
namespace io = strata::io;

namespace {

using strata_test::Crash;
using strata_test::Crashed;
using strata_test::slurp;
using strata_test::spit;
using strata_test::TempDir;

std::span<const std::byte> bytes(std::string_view s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

io::TensorFile sample_file() {
  io::TensorFile f{.kind = "weights", .meta = {{"a", "1"}, {"b", "two"}}, .tensors = {}};
  strata::Tensor<float> t{strata::Shape{3, 4}};
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = 0.5f * static_cast<float>(i) - 2.f;
  f.tensors.push_back({"dense/kernel", t});
  f.tensors.push_back({"dense/bias", strata::Tensor<float>{strata::Shape{4}}});
  f.tensors.push_back({"empty", strata::Tensor<float>{strata::Shape{0, 5}}});
  return f;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// The small MLP with dropout, Adam, seed 5: what every checkpoint test trains.
template <class S>
nn::Sequential make_model(S& s) {
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                          nn::Dropout{0.25f}, nn::Dense{8}, nn::ReLU{}, nn::Dense{3}};
  });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 5});
  return model;
}

// Shuffled afresh every epoch: a resumed run must draw the same orders.
auto blob_data() {
  const auto d = strata_test::blobs(203, 11);
  return strata::data::from_tensor_slices(d.x, d.y).shuffle(64, 3).batch(24);
}

}  // namespace

TEST_CASE("crc32c: the standard check value, and the SSE4.2 path equals the tables") {
  CHECK(strata::crc32c(bytes("123456789")) == 0xE3069283u);
  CHECK(strata::crc32c(bytes("")) == 0u);
  CHECK(strata::crc32c_extend(strata::crc32c(bytes("1234")), bytes("56789")) == 0xE3069283u);
  std::vector<std::byte> buf(1000);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  for (std::size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 999, 1000}) {
    const auto* p = reinterpret_cast<const unsigned char*>(buf.data());
    const std::uint32_t tables = ~strata::detail::crc32c_tables_update(~0u, p, n);
    CHECK(strata::crc32c(std::span(buf).first(n)) == tables);
  }
}

TEST_CASE("tensor files: round trip of metadata and tensors, no temporary file left") {
  TempDir d;
  const auto f = sample_file();
  io::write_tensor_file(d.path / "w.strata", f);
  CHECK(names_in(d.path) == std::vector<std::string>{"w.strata"});
  const auto g = io::read_tensor_file(d.path / "w.strata");
  CHECK(g.kind == "weights");
  CHECK(g.meta == f.meta);
  REQUIRE(g.tensors.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(g.tensors[i].name == f.tensors[i].name);
    CHECK(g.tensors[i].value.shape() == f.tensors[i].value.shape());
    if (f.tensors[i].value.bytes())  // (memcmp of an empty tensor's null data is undefined)
      CHECK(std::memcmp(g.tensors[i].value.data(), f.tensors[i].value.data(), f.tensors[i].value.bytes()) == 0);
  }
}

TEST_CASE("tensor files: every truncation and every flipped byte is an Error naming the file") {
  TempDir d;
  const fs::path good = d.path / "w.strata", bad = d.path / "bad.strata";
  io::write_tensor_file(good, sample_file());
  const auto b = slurp(good);
  for (std::size_t n = 0; n < b.size(); ++n) {
    spit(bad, std::vector<char>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n)));
    CHECK_THROWS_WITH_AS(io::read_tensor_file(bad), doctest::Contains("bad.strata"), strata::Error);
  }
  for (std::size_t i = 0; i < b.size(); ++i) {
    for (unsigned char bit : {0x01, 0x80}) {
      auto c = b;
      c[i] = static_cast<char>(c[i] ^ bit);
      spit(bad, c);
      INFO("byte ", i, " bit ", int(bit));
      CHECK_THROWS_AS(io::read_tensor_file(bad), strata::Error);
    }
  }
  auto longer = b;
  longer.push_back('x');
  spit(bad, longer);
  CHECK_THROWS_WITH_AS(io::read_tensor_file(bad), doctest::Contains("trailing"), strata::Error);
}

TEST_CASE("tensor files: wrong magic, version, a directory, a missing file, non-finite data") {
  TempDir d;
  const fs::path p = d.path / "w.strata";
  io::write_tensor_file(p, sample_file());
  auto b = slurp(p);
  auto c = b;
  c[0] = 'X';
  spit(p, c);
  CHECK_THROWS_WITH_AS(io::read_tensor_file(p), doctest::Contains("bad magic"), strata::Error);
  c = b;
  c[8] = 2;  // version 2
  spit(p, c);
  CHECK_THROWS_WITH_AS(io::read_tensor_file(p), doctest::Contains("format version 2"), strata::Error);
  CHECK_THROWS_WITH_AS(io::read_tensor_file(d.path), doctest::Contains("is a directory"), strata::Error);
  CHECK_THROWS_WITH_AS(io::read_tensor_file(d.path / "nope"), doctest::Contains("does not exist"), strata::Error);
  CHECK_THROWS_WITH_AS(io::write_tensor_file(d.path, sample_file()), doctest::Contains("is a directory"), strata::Error);
  CHECK_THROWS_AS(io::write_tensor_file(d.path / "no_such_dir" / "w.strata", sample_file()), strata::Error);
  auto f = sample_file();
  f.tensors[0].value.data()[5] = std::numeric_limits<float>::quiet_NaN();
  io::write_tensor_file(p, f);
  CHECK_THROWS_WITH_AS(io::read_tensor_file(p), doctest::Contains("dense/kernel holds a non-finite value"), strata::Error);
  CHECK(names_in(d.path) == std::vector<std::string>{"w.strata"});  // failed writes left nothing behind
}

TEST_CASE("weights files: checksummed; a flipped byte is refused; first-format files still load") {
  TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto model = make_model(s);
  model.fit(s.distribute(blob_data()), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  const fs::path p = d.path / "w.bin";
  model.save_weights(p);
  CHECK(io::is_tensor_file(p));
  auto b = slurp(p);
  b[b.size() - 3] = static_cast<char>(b[b.size() - 3] ^ 0x10);  // inside the last tensor's data
  spit(d.path / "flipped.bin", b);
  const auto before = strata_test::flat_weights(model);
  CHECK_THROWS_WITH_AS(model.load_weights(d.path / "flipped.bin"), doctest::Contains("checksum does not match"),
                       strata::Error);
  CHECK(strata_test::flat_weights(model) == before);  // nothing changed
  // A file of the first format, written as that format was.
  std::ofstream v1(d.path / "v1.bin", std::ios::binary);
  v1.write("STRATAW1", 8);
  const auto ws = model.get_weights();
  auto put32 = [&](std::uint32_t v) { v1.write(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<std::uint32_t>(ws.size()));
  for (const auto& w : ws) {
    put32(static_cast<std::uint32_t>(w.name.size()));
    v1.write(w.name.data(), static_cast<std::streamsize>(w.name.size()));
    put32(static_cast<std::uint32_t>(w.value.shape().rank()));
    for (auto dim : w.value.shape().dims()) {
      const std::uint64_t d64 = dim;
      v1.write(reinterpret_cast<const char*>(&d64), 8);
    }
    v1.write(reinterpret_cast<const char*>(w.value.data()), static_cast<std::streamsize>(w.value.bytes()));
  }
  v1.close();
  auto other = make_model(s);
  other.build(strata::Shape{6});
  other.load_weights(d.path / "v1.bin");
  CHECK(strata_test::flat_weights(other) == before);
}

TEST_CASE("dataset pass counters: restoring them replays the same shuffled orders") {
  const auto ds = blob_data();
  auto first_labels = [&] {
    auto it = ds.iterator();
    auto e = it.next();
    REQUIRE(e);
    const auto& y = std::get<1>(*e);
    return std::vector<std::int32_t>(y.data(), y.data() + y.size());
  };
  const auto c0 = ds.pass_counters();
  REQUIRE(c0.size() == 1);
  const auto a = first_labels();
  const auto b = first_labels();  // the next pass: another order
  CHECK(a != b);
  ds.set_pass_counters(c0);
  CHECK(first_labels() == a);
  CHECK(first_labels() == b);
  CHECK_THROWS_AS(ds.set_pass_counters(std::vector<std::uint64_t>{1, 2}), strata::Error);
}

TEST_CASE("checkpoints are logical: written under Mirrored x4 (sharded), loaded under every strategy and backend") {
  TempDir d;
  const fs::path p = d.path / "c.strata";
  strata::MirroredStrategy m4{strata::cpu_replicas(4)};
  auto a = make_model(m4);
  a.fit(m4.distribute(blob_data()), {.epochs = 2, .verbose = nn::Verbosity::Silent});
  a.save_checkpoint(p, {.step = 0, .epoch = 2, .batch = 0, .data_counters = {3}});
  // the reference: the same model trained on, uninterrupted
  strata::MirroredStrategy m2{strata::cpu_replicas(2)};
  auto ref = make_model(m2);
  ref.build(strata::Shape{6});
  ref.load_checkpoint(p);
  CHECK(strata_test::flat_weights(ref) == strata_test::flat_weights(a));
  CHECK(ref.iterations() == a.iterations());

  auto check_loads = [&](auto& s) {
    auto m = make_model(s);
    m.build(strata::Shape{6});
    const auto pos = m.load_checkpoint(p);
    CHECK(pos.epoch == 2);
    CHECK(pos.data_counters == std::vector<std::uint64_t>{3});
    CHECK(m.iterations() == a.iterations());
    CHECK(strata_test::flat_weights(m) == strata_test::flat_weights(a));
    // saving it again under this strategy gives the same tensors (optimizer state included)
    m.save_checkpoint(d.path / "again.strata", pos);
    const auto x = io::read_tensor_file(p), y = io::read_tensor_file(d.path / "again.strata");
    REQUIRE(x.tensors.size() == y.tensors.size());
    for (std::size_t i = 0; i < x.tensors.size(); ++i) {
      CHECK(x.tensors[i].name == y.tensors[i].name);
      CHECK(std::memcmp(x.tensors[i].value.data(), y.tensors[i].value.data(), x.tensors[i].value.bytes()) == 0);
    }
  };
  // every strategy on every backend: 3 replicas (sharded), 3 parameter-server shards
  strata::StrategyChoice three = strata_test::small_choice(3);
  three.servers = 3;
  strata_test::for_each_strategy_and_backend(
      {}, [&](auto& s, const strata::StrategyInfo&, strata_test::Backend) { check_loads(s); }, three);
  INFO("mirrored_4, the writer");
  check_loads(m4);
}

TEST_CASE("checkpoints refuse what would not resume exactly: another optimizer, seed or model") {
  TempDir d;
  const fs::path p = d.path / "c.strata";
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto a = make_model(s);
  a.build(strata::Shape{6});
  a.save_checkpoint(p);
  auto sgd = s.scope([] { return strata_test::blobs_mlp(); });
  sgd.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 5});
  sgd.build(strata::Shape{6});
  CHECK_THROWS_WITH_AS(sgd.load_checkpoint(p), doctest::Contains("optimizer"), strata::Error);
  auto seed = make_model(s);
  seed.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 6});
  seed.build(strata::Shape{6});
  CHECK_THROWS_WITH_AS(seed.load_checkpoint(p), doctest::Contains("seed 5"), strata::Error);
  auto wide = s.scope([] { return nn::Sequential{nn::Input{{6}}, nn::Dense{4}}; });
  wide.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 5});
  wide.build(strata::Shape{6});
  CHECK_THROWS_WITH_AS(wide.load_checkpoint(p), doctest::Contains("parameters"), strata::ShapeError);
  // a weights file is not a checkpoint
  a.save_weights(d.path / "w.bin");
  CHECK_THROWS_WITH_AS(a.load_checkpoint(d.path / "w.bin"), doctest::Contains("not a checkpoint"), strata::Error);
}

namespace {
template <class S>
std::vector<float> uninterrupted(S& s, int epochs) {
  auto m = make_model(s);
  m.fit(s.distribute(blob_data()), {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  return strata_test::flat_weights(m);
}
}  // namespace

// A run crashed after batch `crash_at` (each of `crashes`) and started
// again ends bitwise as one never stopped, resumed from the newest step saved
// before the crash: every 4 steps and at epoch ends (9, 18) when `settled`;
// a parameter server saves at epoch ends only (steps in flight).
template <class S>
void resumes_bitwise(S& s, std::initializer_list<int> crashes, bool settled = true) {
  const auto want = uninterrupted(s, 3);  // 9 batches an epoch, 27 steps
  for (int crash_at : crashes) {
    INFO("crash after batch ", crash_at);
    TempDir d;
    nn::BackupAndRestore backup{d.path / "ck", {.save_every_steps = 4, .keep = 2}};
    {
      auto m = make_model(s);
      Crash crash{crash_at};
      CHECK_THROWS_AS(m.fit(s.distribute(blob_data()), {.epochs = 3, .verbose = nn::Verbosity::Silent,
                                                       .callbacks = {&backup, &crash}}),
                      Crashed);
      CHECK(backup.checkpoints().size() <= 2);
    }
    auto m = make_model(s);  // a fresh process would build exactly this
    m.fit(s.distribute(blob_data()), {.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = {&backup}});
    std::optional<std::int64_t> newest;
    for (std::int64_t k = 1; k <= crash_at - 1; ++k)
      if ((settled && k % 4 == 0) || k % 9 == 0) newest = k;
    CHECK(backup.resumed_from() == newest);
    CHECK(strata_test::flat_weights(m) == want);
    CHECK(m.iterations() == 27);
    CHECK(backup.checkpoints().empty());  // a completed fit cleans up
  }
}

TEST_CASE("BackupAndRestore: a run crashed and started again ends bitwise as one never stopped, under every strategy and backend") {
  // after batch 17: resumed from a save in the middle of the second epoch
  // (a parameter server: from the first epoch's end). Staleness 0: the
  // parameter server's rounds are deterministic too; 3 shards.
  strata::StrategyChoice choice = strata_test::small_choice();
  choice.staleness = 0;
  choice.servers = 3;
  strata_test::for_each_strategy_and_backend(
      {}, [](auto& s, const strata::StrategyInfo& info, strata_test::Backend) { resumes_bitwise(s, {17}, info.synchronous); },
      choice);
}

// Which checkpoint a restart resumes from, whatever the strategy: before
// any save, at a save, just after an epoch's end, late in the run; and what
// the sweep's 2 replicas do not reach: the sharded update's optimizer state.
TEST_CASE("BackupAndRestore: a run crashed at any step and started again ends bitwise as one never stopped") {
  strata::MirroredStrategy m2{strata::cpu_replicas(2)};
  {
    INFO("mirrored_2");
    resumes_bitwise(m2, {1, 4, 9, 10, 17, 26});
  }
  strata::MirroredStrategy m3{strata::cpu_replicas(3)};
  {
    INFO("mirrored_3 (sharded)");
    resumes_bitwise(m3, {10, 26});
  }
  // saves at epoch ends only: nothing before the first, the second's late in the run
  strata::ParameterServerStrategy ps{{.workers = 2, .servers = 3, .staleness = std::uint64_t{0}}};
  INFO("parameter_server_k0_3_shards");
  resumes_bitwise(ps, {1, 26}, false);
}

TEST_CASE("BackupAndRestore under a parameter server: SIGTERM stops scheduling, the steps in flight land, then it saves") {
  TempDir d;
  auto fresh = [] { return strata::ParameterServerStrategy{{.workers = 2, .servers = 3, .staleness = std::uint64_t{0}}}; };
  auto ref_s = fresh();
  const auto want = uninterrupted(ref_s, 2);
  nn::BackupAndRestore backup{d.path, {.save_every_steps = 4}};
  nn::LambdaCallback term;
  int seen = 0;
  term.on_batch_end_fn = [&](int, const nn::Logs&) {
    if (++seen == 5) std::raise(SIGTERM);
  };
  std::int64_t stopped_at = 0;
  {
    auto s = fresh();
    auto m = make_model(s);
    CHECK_THROWS_AS(m.fit(s.distribute(blob_data()),
                          {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&backup, &term}}),
                    nn::Preempted);
    stopped_at = m.iterations();
    CHECK(stopped_at >= 5);  // the steps scheduled before the signal all landed
  }
  REQUIRE(backup.checkpoints().size() == 1);
  CHECK(backup.checkpoints().front().first == stopped_at);
  auto s = fresh();
  auto m = make_model(s);
  m.fit(s.distribute(blob_data()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&backup}});
  CHECK(backup.resumed_from() == stopped_at);
  CHECK(strata_test::flat_weights(m) == want);
}

TEST_CASE("BackupAndRestore: SIGTERM finishes the step, saves, throws Preempted; the rerun resumes") {
  TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  const auto want = uninterrupted(s, 2);
  nn::BackupAndRestore backup{d.path, {.keep = 1}};
  nn::LambdaCallback term;
  int seen = 0;
  term.on_batch_end_fn = [&](int, const nn::Logs&) {
    if (++seen == 5) std::raise(SIGTERM);
  };
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  {
    auto m = make_model(s);
    try {
      m.fit(s.distribute(blob_data()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&backup, &term}});
      FAIL("fit did not stop on SIGTERM");
    } catch (const nn::Preempted& e) {
      CHECK(e.signal() == SIGTERM);
      CHECK(std::string(e.what()).find("ckpt-000000000005.strata") != std::string::npos);
    }
    CHECK(m.iterations() == 5);  // the step in progress finished, no more
  }
  REQUIRE(backup.checkpoints().size() == 1);
  CHECK(backup.checkpoints().front().first == 5);
  auto m = make_model(s);
  m.fit(s.distribute(blob_data()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&backup}});
  CHECK(strata_test::flat_weights(m) == want);
  CHECK(m.iterations() == 18);
  CHECK(backup.resumed_from() == 5);
  // outside fit the handler that was there before is back
  struct sigaction now {};
  ::sigaction(SIGTERM, nullptr, &now);
  CHECK((now.sa_handler == before.sa_handler));
}

TEST_CASE("BackupAndRestore: a corrupt newest checkpoint is skipped for the one before") {
  TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  const auto want = uninterrupted(s, 2);
  nn::BackupAndRestore backup{d.path, {.save_every_steps = 3, .keep = 3}};
  {
    auto m = make_model(s);
    Crash crash{8};
    CHECK_THROWS_AS(m.fit(s.distribute(blob_data()),
                          {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&backup, &crash}}),
                    Crashed);
  }
  auto all = backup.checkpoints();
  REQUIRE(all.size() == 2);  // steps 3 and 6
  auto b = slurp(all.back().second);
  b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 1);
  spit(all.back().second, b);
  auto m = make_model(s);
  m.fit(s.distribute(blob_data()), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&backup}});
  CHECK(strata_test::flat_weights(m) == want);
  CHECK(backup.resumed_from() == 3);  // step 6's file failed its checksum
}

TEST_CASE("a writer killed mid-write leaves the previous checkpoint loadable, and its temporary file is pruned") {
  TempDir d;
  nn::BackupAndRestore backup{d.path};
  io::TensorFile big{.kind = "weights", .meta = {}, .tensors = {}};
  big.tensors.push_back({"x", strata::Tensor<float>{strata::Shape{std::size_t{16} << 20}}});  // 64 MiB
  io::write_tensor_file(backup.path_for(1), big);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // writes step after step until killed
    for (std::int64_t step = 2;; ++step) io::write_tensor_file(backup.path_for(step), big);
  }
  // kill it while a temporary file exists (mid-write)
  bool caught_mid_write = false;  // within 30 s (a forked child under a sanitizer, on a busy machine, starts slowly)
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!caught_mid_write && std::chrono::steady_clock::now() < give_up) {
    for (const auto& n : names_in(d.path))
      if (n.find(".tmp-") != std::string::npos) caught_mid_write = true;
    if (!caught_mid_write) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(caught_mid_write);
  auto all = backup.checkpoints();
  REQUIRE(!all.empty());
  for (const auto& [step, path] : all) CHECK_NOTHROW(io::read_tensor_file(path));  // every complete one loads
  backup.prune();
  for (const auto& n : names_in(d.path)) CHECK(n.find(".tmp-") == std::string::npos);
}

}  // namespace checkpoint_test
