// A checkpoint directory belongs to one run (issue 21): BackupAndRestore
// never deletes what its run did not write, refuses another run's directory
// naming what differs, keeps a second live run out, refuses a directory it
// can resume nothing from and a checkpoint past this fit's end, and deletes
// its own checkpoints only once everything asked for is written.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <strata/io/dir_lock.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

#include "support/blobs.hpp"
#include "support/checkpoint_files.hpp"

namespace checkpoint_dir_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace fs = std::filesystem;
namespace nn = strata::nn;
namespace io = strata::io;

namespace {

using strata_test::Crash;
using strata_test::Crashed;
using strata_test::slurp;
using strata_test::spit;
using strata_test::TempDir;

// every file in `dir` with its bytes: what a run must leave alone
std::vector<std::pair<std::string, std::vector<char>>> snapshot(const fs::path& dir) {
  std::vector<std::pair<std::string, std::vector<char>>> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "run.lock") out.emplace_back(e.path().filename(), slurp(e.path()));
  std::sort(out.begin(), out.end());
  return out;
}

nn::Sequential make_model(auto& s, std::uint64_t seed = 5, std::size_t width = 16) {
  auto model = s.scope([width] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{width, {.activation = nn::Activation::Tanh}}, nn::Dropout{0.25f},
                          nn::Dense{3}};
  });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = seed});
  return model;
}

auto blob_data(std::size_t batch = 24, std::size_t n = 203) {
  const auto d = strata_test::blobs(n, 11);
  return strata::data::from_tensor_slices(d.x, d.y).shuffle(64, 3).batch(batch);  // 9 batches of 24
}

struct Term final : nn::Callback {
  int at, seen = 0;
  explicit Term(int a) : at(a) {}
  void on_batch_end(int, const nn::Logs&) override {
    if (++seen == at) std::raise(SIGTERM);
  }
};

nn::FitOptions quiet(int epochs, std::vector<nn::Callback*> cbs) {
  return {.epochs = epochs, .verbose = nn::Verbosity::Silent, .callbacks = std::move(cbs)};
}

// A run of model `seed` crashed after `at` batches, its checkpoints left in `dir`.
void crashed_run(const fs::path& dir, int at, std::uint64_t seed = 5, std::size_t batch = 24) {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  nn::BackupAndRestore b{dir, {.save_every_steps = 2, .keep = 2}};
  auto m = make_model(s, seed);
  Crash crash{at};
  CHECK_THROWS_AS(m.fit(s.distribute(blob_data(batch)), quiet(2, {&b, &crash})), Crashed);
}

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("pruning keeps this run's checkpoints when the directory holds higher-numbered files it cannot load") {
  TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  std::vector<float> want;
  {
    auto m = make_model(s);
    m.fit(s.distribute(blob_data()), quiet(2, {}));
    want = strata_test::flat_weights(m);
  }
  Crash crash{5};
  {
    nn::BackupAndRestore b{d.path, {.save_every_steps = 2, .keep = 1}};
    auto m = make_model(s);
    CHECK_THROWS_AS(m.fit(s.distribute(blob_data()), quiet(2, {&b, &crash})), Crashed);
  }
  // higher-numbered files no run can load: junk, and a truncated copy of our own
  spit(d.path / "ckpt-000000000999.strata", {'j', 'u', 'n', 'k'});
  auto own = slurp(d.path / "ckpt-000000000004.strata");
  own.resize(own.size() / 2);
  spit(d.path / "ckpt-000000000998.strata", own);
  const auto junk = slurp(d.path / "ckpt-000000000999.strata");
  nn::BackupAndRestore b{d.path, {.save_every_steps = 2, .keep = 1}};
  Term term{3};
  std::string saved;
  {
    auto m = make_model(s);
    try {
      m.fit(s.distribute(blob_data()), quiet(2, {&b, &term}));
      FAIL("not preempted");
    } catch (const nn::Preempted& e) {
      saved = e.checkpoint();
    }
  }
  CHECK(b.resumed_from() == 4);
  CHECK(fs::exists(saved));  // what it said it saved is there (keep = 1 kept it, not step 999)
  CHECK(saved.ends_with("ckpt-000000000007.strata"));
  CHECK(slurp(d.path / "ckpt-000000000999.strata") == junk);  // never its to delete
  CHECK(fs::exists(d.path / "ckpt-000000000998.strata"));
  auto m = make_model(s);
  m.fit(s.distribute(blob_data()), quiet(2, {&b}));
  CHECK(b.resumed_from() == 7);
  CHECK(strata_test::flat_weights(m) == want);
  // done: its own checkpoints went, the files it could not read stayed
  CHECK(fs::exists(d.path / "ckpt-000000000999.strata"));
  CHECK(!fs::exists(d.path / "ckpt-000000000007.strata"));
  CHECK(!fs::exists(d.path / "run.strata"));
}

TEST_CASE("a directory of another run is refused naming what differs, and nothing of it is touched") {
  TempDir d;
  crashed_run(d.path, 5);
  const auto before = snapshot(d.path);
  REQUIRE(before.size() == 3);  // run.strata, ckpt 2 and 4
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  SUBCASE("another seed") {
    nn::BackupAndRestore b{d.path};
    auto m = make_model(s, 6);
    const auto msg = message_of([&] { m.fit(s.distribute(blob_data()), quiet(2, {&b})); });
    CHECK(msg.find("belongs to another run") != std::string::npos);
    CHECK(msg.find("seed: 5 there, 6 here") != std::string::npos);
    CHECK_THROWS_AS(m.fit(s.distribute(blob_data()), quiet(2, {&b})), nn::CheckpointDirectoryError);
  }
  SUBCASE("another model") {
    nn::BackupAndRestore b{d.path};
    auto m = make_model(s, 5, 8);
    const auto msg = message_of([&] { m.fit(s.distribute(blob_data()), quiet(2, {&b})); });
    CHECK(msg.find("parameter count: ") != std::string::npos);
  }
  SUBCASE("another global batch: the resume would train samples twice or skip some") {
    nn::BackupAndRestore b{d.path};
    auto m = make_model(s);
    const auto msg = message_of([&] { m.fit(s.distribute(blob_data(12)), quiet(2, {&b})); });
    CHECK(msg.find("global batch: 24 there, 12 here") != std::string::npos);
    CHECK(msg.find("batches per epoch: 9 there, 17 here") != std::string::npos);
  }
  SUBCASE("another data size") {
    nn::BackupAndRestore b{d.path};
    auto m = make_model(s);
    const auto msg = message_of([&] { m.fit(s.distribute(blob_data(24, 150)), quiet(2, {&b})); });
    CHECK(msg.find("batches per epoch: 9 there, 7 here") != std::string::npos);
    CHECK(msg.find("global batch") == std::string::npos);
  }
  SUBCASE("the record removed by hand: the checkpoints still name their run") {
    fs::remove(d.path / "run.strata");
    nn::BackupAndRestore b{d.path};
    auto m = make_model(s, 6);
    CHECK(message_of([&] { m.fit(s.distribute(blob_data()), quiet(2, {&b})); }).find("seed: 5 there, 6 here") !=
          std::string::npos);
    CHECK(snapshot(d.path).size() == 2);
    return;
  }
  CHECK(snapshot(d.path) == before);
  // the same settings under another strategy are the same run: it resumes
  strata::CentralStorageStrategy cs{strata::cpu_replicas(3)};
  nn::BackupAndRestore b{d.path};
  auto m = make_model(cs);
  m.fit(cs.distribute(blob_data()), quiet(2, {&b}));
  CHECK(b.resumed_from() == 4);
}

TEST_CASE("start_over begins afresh: the recorded run's checkpoints go, files no run can read stay") {
  TempDir d;
  crashed_run(d.path, 5, 7);
  spit(d.path / "ckpt-000000000050.strata", {'x'});
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  nn::BackupAndRestore b{d.path, {.delete_at_end = false, .start_over = true}};
  auto m = make_model(s);
  m.fit(s.distribute(blob_data()), quiet(1, {&b}));
  CHECK(!b.resumed_from());
  CHECK(!fs::exists(d.path / "ckpt-000000000004.strata"));  // the seed-7 run's
  CHECK(fs::exists(d.path / "ckpt-000000000050.strata"));
  CHECK(fs::exists(d.path / "ckpt-000000000009.strata"));  // this run's epoch end
  b.finish();
  CHECK(!fs::exists(d.path / "ckpt-000000000009.strata"));
  CHECK(fs::exists(d.path / "ckpt-000000000050.strata"));
}

TEST_CASE("a directory holding nothing this run can resume from is refused, listing every file and why") {
  TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  spit(d.path / "ckpt-000000000003.strata", {'x'});
  fs::create_directory(d.path / "ckpt-000000000010.strata");
  nn::BackupAndRestore b{d.path};
  auto m = make_model(s);
  const auto msg = message_of([&] { m.fit(s.distribute(blob_data()), quiet(1, {&b})); });
  CHECK(msg.find("holds 2 file(s) named like checkpoints") != std::string::npos);
  CHECK(msg.find("ckpt-000000000003.strata: ") != std::string::npos);
  CHECK(msg.find("bad magic") != std::string::npos);
  CHECK(msg.find("ckpt-000000000010.strata is not a file") != std::string::npos);
  CHECK(msg.find("Nothing was deleted") != std::string::npos);
  CHECK(m.iterations() == 0);  // no silent fresh start
  CHECK(fs::is_directory(d.path / "ckpt-000000000010.strata"));
  CHECK(!fs::exists(d.path / "run.strata"));  // and no trace of the refused run
  CHECK(!fs::exists(d.path / "run.lock"));
  // a directory in place of the newest checkpoint, with an older one of this run: resumes from that
  TempDir e;
  crashed_run(e.path, 5);
  fs::create_directory(e.path / "ckpt-000000000100.strata");
  nn::BackupAndRestore c{e.path};
  auto m2 = make_model(s);
  m2.fit(s.distribute(blob_data()), quiet(2, {&c}));
  CHECK(c.resumed_from() == 4);
  CHECK(fs::is_directory(e.path / "ckpt-000000000100.strata"));
}

TEST_CASE("a checkpoint past the end of this fit's epochs is refused, and kept") {
  TempDir d;
  crashed_run(d.path, 12);  // in epoch 2: steps 9 (its start) and 10 kept (12 crashed before saving)
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  const auto before = snapshot(d.path);
  nn::BackupAndRestore b{d.path};
  auto m = make_model(s);
  const auto msg = message_of([&] { m.fit(s.distribute(blob_data()), quiet(1, {&b})); });
  INFO(msg);
  CHECK(msg.find("checkpoint of step 10") != std::string::npos);
  CHECK(msg.find("epoch 2, batch 1, past the end of this fit's 1 epoch(s)") != std::string::npos);
  CHECK(msg.find("at least 2 epochs") != std::string::npos);
  CHECK(snapshot(d.path) == before);
}

TEST_CASE("a second live run is kept out of the directory; a dead one's lock keeps nothing") {
  TempDir d;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // holds the directory until killed
    io::DirLock lock{d.path / "run.lock", "child"};
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    for (;;) ::pause();
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  nn::BackupAndRestore b{d.path};
  auto m = make_model(s);
  const auto msg = message_of([&] { m.fit(s.distribute(blob_data()), quiet(1, {&b})); });
  CHECK(msg.find("is in use by another live run (process " + std::to_string(child)) != std::string::npos);
  CHECK_THROWS_AS(m.fit(s.distribute(blob_data()), quiet(1, {&b})), io::DirectoryInUse);
  CHECK(m.iterations() == 0);
  // and in this process: a second BackupAndRestore on a directory a fit holds
  nn::BackupAndRestore mine{d.path / "x", {.delete_at_end = false}};
  auto m2 = make_model(s);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  m2.fit(s.distribute(blob_data()), quiet(1, {&mine}));  // holds d/x until finish()
  nn::BackupAndRestore other{d.path / "x"};
  auto m3 = make_model(s);
  CHECK_THROWS_AS(m3.fit(s.distribute(blob_data()), quiet(1, {&other})), io::DirectoryInUse);
  mine.finish();
  CHECK(!fs::exists(d.path / "x"));  // it made the directory, and it is empty now
  // the child was killed holding d's lock: the kernel released it
  m.fit(s.distribute(blob_data()), quiet(1, {&b}));
  CHECK(m.iterations() == 9);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("delete_at_end = false: a completed run keeps its checkpoints until finish(); run again, it trains nothing") {
  TempDir d;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  std::vector<float> done;
  {
    nn::BackupAndRestore b{d.path / "ck", {.delete_at_end = false}};
    auto m = make_model(s);
    m.fit(s.distribute(blob_data()), quiet(2, {&b}));
    done = strata_test::flat_weights(m);
    REQUIRE(b.checkpoints().size() == 2);  // the epoch ends: kept for the work after fit
  }  // gone without finish(), as a process killed in its evaluation or saving
  spit(d.path / "ck" / "notes.txt", {'m', 'i', 'n', 'e'});
  nn::BackupAndRestore again{d.path / "ck", {.delete_at_end = false}};
  auto m = make_model(s);
  m.fit(s.distribute(blob_data()), quiet(2, {&again}));
  CHECK(again.resumed_from() == 18);
  CHECK(m.iterations() == 18);
  CHECK(strata_test::flat_weights(m) == done);
  again.finish();
  CHECK(again.checkpoints().empty());
  CHECK(fs::exists(d.path / "ck" / "notes.txt"));  // not its file
  CHECK(!fs::exists(d.path / "ck" / "run.strata"));
}

}  // namespace checkpoint_dir_test
