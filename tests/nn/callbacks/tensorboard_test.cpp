// TensorBoard event files (issue 24): the TFRecord framing, the Event
// encoding, and the TensorBoard callback, read back by a reader that is not
// strata's (tests/tensorboard/read_events.py: crcmod's CRC-32C and
// protobuf's decoder over event.proto compiled by protoc).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <strata/io/event_file.hpp>
#include <strata/io/tfrecord.hpp>
#include <strata/nn.hpp>
#include <strata/nn/callbacks/tensorboard.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "support/checkpoint_files.hpp"
#include "device/host_as_gpu.hpp"
#include "strategy/strategy_sweep.hpp"

namespace fs = std::filesystem;
namespace nn = strata::nn;
using strata_test::TempDir;

namespace {

//! The lines the outside reader prints for `files` (its exit status must be 0).
std::vector<std::string> read_with_protobuf(const std::vector<fs::path>& files) {
  const char* reader = std::getenv("STRATA_TENSORBOARD_READER");
  REQUIRE_MESSAGE(reader, "STRATA_TENSORBOARD_READER (python3 tests/tensorboard/read_events.py) is not set: run "
                          "under meson");
  std::string cmd = reader;
  for (const auto& f : files) cmd += " '" + f.string() + "'";
  cmd += " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  INFO(out);
  REQUIRE(status == 0);
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

//! "folder tag" -> values in step order, from the reader's lines; steps into `steps`.
std::map<std::string, std::vector<double>> scalars(const std::vector<std::string>& lines,
                                                   std::map<std::string, std::vector<long>>* steps = nullptr) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& l : lines) {
    if (l.starts_with("version ")) {
      CHECK(l == "version brain.Event:2");
      continue;
    }
    std::istringstream in(l);
    std::string folder, tag, value;  // (the value through strtod: "nan" too)
    long step = 0;
    REQUIRE((in >> folder >> step >> tag >> value));
    const double v = std::strtod(value.c_str(), nullptr);
    out[folder + " " + tag].push_back(v);
    if (steps) (*steps)[folder + " " + tag].push_back(step);
  }
  return out;
}

}  // namespace

TEST_CASE("TFRecord: the masked CRC-32C of the standard check string; records round-trip, empty ones too") {
  // crc32c("123456789") = 0xE3069283; masked: ((c >> 15) | (c << 17)) + 0xa282ead8
  const std::uint32_t c = 0xE3069283u;
  CHECK(strata::io::tfrecord_masked_crc("123456789") == ((c >> 15) | (c << 17)) + 0xa282ead8u);
  TempDir d;
  const fs::path f = d.path / "sub" / "r.tfrecord";
  {
    strata::io::TfRecordWriter w{f};  // makes the folder
    w.write("first");
    w.write("");
    w.write(std::string(1000, 'x'));
    w.flush();
  }
  const auto rs = strata::io::read_tfrecords(f);
  REQUIRE(rs.size() == 3);
  CHECK(rs[0] == "first");
  CHECK(rs[1].empty());
  CHECK(rs[2] == std::string(1000, 'x'));
  CHECK(fs::file_size(f) == 3 * 16 + 5 + 1000);
}

TEST_CASE("TFRecord: a flipped byte anywhere and any truncation are Errors naming the record") {
  TempDir d;
  const fs::path f = d.path / "r.tfrecord";
  {
    strata::io::TfRecordWriter w{f};
    w.write("abc");
    w.write("defgh");
  }
  const auto good = strata_test::slurp(f);
  REQUIRE(good.size() == 16 + 3 + 16 + 5);
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    strata_test::spit(f, bad);
    CAPTURE(i);
    CHECK_THROWS_WITH_AS(strata::io::read_tfrecords(f), doctest::Contains(i < 19 ? "record 0" : "record 1"),
                         strata::Error);
  }
  for (std::size_t n = 1; n < good.size(); ++n) {
    if (n == 19) continue;  // a whole first record: a valid file of one record
    strata_test::spit(f, std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    CAPTURE(n);
    CHECK_THROWS_AS(strata::io::read_tfrecords(f), strata::Error);
  }
  CHECK_THROWS_WITH_AS(strata::io::read_tfrecords(d.path / "missing"), doctest::Contains("cannot open"),
                       strata::Error);
}

TEST_CASE("event files: protobuf reads the version and scalars strata wrote, steps and tags as written") {
  TempDir d;
  fs::path file;
  {
    strata::io::EventFileWriter w{d.path / "run"};
    file = w.path();
    w.scalar("loss", 0.5, 0);
    w.scalar("loss", 0.25, 7);
    w.scalar("a/b tag", -3.0, -1);  // a negative step: protobuf's ten-byte varint
    w.scalar("big", 1e30, 1LL << 40);
  }
  CHECK(file.filename().string().starts_with("events.out.tfevents."));
  const auto lines = read_with_protobuf({file});
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == "version brain.Event:2");
  CHECK(lines[1] == "run 0 loss 0.5");
  CHECK(lines[2] == "run 7 loss 0.25");
  CHECK(lines[3].starts_with("run -1 a/b"));  // the reader splits on spaces; the tag is intact in the file
  CHECK(lines[4] == "run 1099511627776 big " + std::string("1.0000000150474662e+30"));
}

TEST_CASE("TensorBoard callback: epoch, validation and batch scalars equal fit's logs, the rate each epoch used") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto model = s.scope([] { return strata_test::blobs_mlp(); });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 7});
  const auto train = strata_test::blobs(96, 1), val = strata_test::blobs(32, 2);
  TempDir d;
  nn::TensorBoard tb{model, d.path / "logs", {.update_freq = 2}};
  nn::LearningRateScheduler halve_once{[](int epoch, float lr) { return epoch == 1 ? lr * 0.5f : lr; }};
  const auto history = model.fit(strata::data::from_tensor_slices(train.x, train.y).batch(16),
                                 {.epochs = 3, .verbose = nn::Verbosity::Silent, .callbacks = {&halve_once, &tb}},
                                 strata::data::from_tensor_slices(val.x, val.y).batch(16));
  REQUIRE(fs::exists(tb.train_file()));
  REQUIRE(fs::exists(tb.validation_file()));
  CHECK(tb.train_file().parent_path() == d.path / "logs" / "train");
  CHECK(tb.validation_file().parent_path() == d.path / "logs" / "validation");
  std::map<std::string, std::vector<long>> steps;
  const auto got = scalars(read_with_protobuf({tb.train_file(), tb.validation_file()}), &steps);
  for (const char* name : {"loss", "accuracy"}) {
    CAPTURE(name);
    const auto want = history.at(name), want_val = history.at(std::string("val_") + name);
    const auto& epoch = got.at(std::string("train epoch_") + name);
    const auto& epoch_val = got.at(std::string("validation epoch_") + name);
    REQUIRE(epoch.size() == 3);
    REQUIRE(epoch_val.size() == 3);
    for (std::size_t e = 0; e < 3; ++e) {
      CHECK(epoch[e] == static_cast<double>(static_cast<float>(want[e])));
      CHECK(epoch_val[e] == static_cast<double>(static_cast<float>(want_val[e])));
    }
    CHECK(steps.at(std::string("train epoch_") + name) == std::vector<long>{0, 1, 2});
    // 6 batches an epoch, 18 in all: every second one, at the global batch count
    const auto& batch_steps = steps.at(std::string("train batch_") + name);
    CHECK(batch_steps == std::vector<long>{2, 4, 6, 8, 10, 12, 14, 16, 18});
    // the last batch of an epoch's running mean is the epoch's value
    CHECK(got.at(std::string("train batch_") + name)[2] == epoch[0]);
  }
  const auto& sps = got.at("train epoch_steps_per_second");
  REQUIRE(sps.size() == 3);
  for (double v : sps) CHECK(v > 0);
  CHECK(got.count("validation epoch_steps_per_second") == 0);
  CHECK(got.count("train epoch_samples_per_second") == 0);  // no batch size given: no samples
  CHECK(got.count("train batch_samples_per_second") == 0);
  CHECK(got.count("train epoch_skipped_steps") == 0);  // every step finite
  CHECK(got.count("train epoch_collective_ms_per_step") == 0);  // no trace session: no time per category
  // the rate each epoch trained with: Adam's 0.01, halved from epoch 1 on by the scheduler
  const float r = 0.01f;
  CHECK(got.at("train epoch_learning_rate") ==
        std::vector<double>{static_cast<double>(r), static_cast<double>(r * 0.5f), static_cast<double>(r * 0.5f)});
}

TEST_CASE("TensorBoard callback: samples per second given the batch size, skipped non-finite steps") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto model = s.scope([] { return strata_test::blobs_mlp(); });
  model.compile(nn::SGD{0.05}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  auto data = strata_test::blobs(96, 1);
  for (std::size_t j = 0; j < 6; ++j) data.x[20 * 6 + j] = std::nanf("");  // a row of batch 1 of every epoch
  TempDir d;
  nn::TensorBoard tb{model, d.path / "logs", {.update_freq = 3, .batch_size = 16}};
  const auto history = model.fit(strata::data::from_tensor_slices(data.x, data.y).batch(16),
                                 {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&tb}});
  std::map<std::string, std::vector<long>> steps;
  const auto got = scalars(read_with_protobuf({tb.train_file()}), &steps);
  // 6 batches an epoch of 16 samples: samples/s is 16 x steps/s over the same time
  const auto& sps = got.at("train epoch_steps_per_second");
  const auto& samples = got.at("train epoch_samples_per_second");
  REQUIRE(samples.size() == 2);
  CHECK(steps.at("train epoch_samples_per_second") == std::vector<long>{0, 1});
  for (std::size_t e = 0; e < 2; ++e) {
    CHECK(samples[e] > 0);
    CHECK(samples[e] / sps[e] == doctest::Approx(16.0).epsilon(1e-6));
  }
  CHECK(steps.at("train batch_samples_per_second") == std::vector<long>{3, 6, 9, 12});
  for (double v : got.at("train batch_samples_per_second")) CHECK(v > 0);
  // the skipped step: in each epoch's logs, and in the batch values after it
  CHECK(history.at("skipped_steps") == std::vector<double>{1, 1});
  CHECK(got.at("train epoch_skipped_steps") == std::vector<double>{1, 1});
  CHECK(steps.at("train epoch_skipped_steps") == std::vector<long>{0, 1});
  CHECK(got.at("train batch_skipped_steps") == std::vector<double>{1, 1, 1, 1});
  CHECK(steps.at("train batch_skipped_steps") == std::vector<long>{3, 6, 9, 12});
  CHECK_THROWS_WITH_AS(nn::TensorBoard(true, d.path, {.batch_size = -1}), doctest::Contains("batch_size"),
                       strata::Error);
}

TEST_CASE("TensorBoard callback: update_freq counts batches across executions of several steps") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto model = s.scope([] { return strata_test::blobs_mlp(); });
  model.compile(nn::SGD{0.05}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {},
                {.seed = 7, .steps_per_execution = 4});
  const auto data = strata_test::blobs(96, 1);
  TempDir d;
  nn::TensorBoard tb{model, d.path / "logs", {.update_freq = 3, .batch_size = 16}};
  const auto history = model.fit(strata::data::from_tensor_slices(data.x, data.y).batch(16),
                                 {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&tb}});
  std::map<std::string, std::vector<long>> steps;
  const auto got = scalars(read_with_protobuf({tb.train_file()}), &steps);
  // 6 batches an epoch in executions of 4 and 2: the batch count reaches 4, 6, 10, 12, each passing a multiple
  // of 3; the scalars are at the batch count
  CHECK(steps.at("train batch_loss") == std::vector<long>{4, 6, 10, 12});
  CHECK(got.at("train batch_loss")[1] == static_cast<double>(static_cast<float>(history.at("loss")[0])));
  // per epoch: 6 batches of 16 samples, whatever the executions
  const auto& sps = got.at("train epoch_steps_per_second");
  const auto& samples = got.at("train epoch_samples_per_second");
  REQUIRE(samples.size() == 2);
  for (std::size_t e = 0; e < 2; ++e) CHECK(samples[e] / sps[e] == doctest::Approx(16.0).epsilon(1e-6));
}

TEST_CASE("TensorBoard callback: while a trace records, each epoch's time per step in its categories") {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto model = s.scope([] { return strata_test::blobs_mlp(); });
  model.compile(nn::SGD{0.05}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  const auto data = strata_test::blobs(96, 1);
  TempDir d;
  nn::TensorBoard tb{model, d.path / "logs"};
  {
    strata::trace::Session trace{{}};  // totals only, no file
    model.fit(strata::data::from_tensor_slices(data.x, data.y).batch(16),
              {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&tb}});
  }
  std::map<std::string, std::vector<long>> steps;
  const auto got = scalars(read_with_protobuf({tb.train_file()}), &steps);
  for (const char* c : {"data", "forward", "backward", "collective", "update"}) {
    const std::string tag = std::string("train epoch_") + c + "_ms_per_step";
    CAPTURE(tag);
    REQUIRE(got.count(tag) == 1);
    CHECK(steps.at(tag) == std::vector<long>{0, 1});
    for (double v : got.at(tag)) CHECK(v > 0);
  }
  // the forward is part of each step: its time per step is below the step's
  const double step_ms = 1e3 / got.at("train epoch_steps_per_second")[1];
  CHECK(got.at("train epoch_forward_ms_per_step")[1] < step_ms);
}

TEST_CASE("TensorBoard callback: a process that is not the chief writes nothing; bad options are Errors") {
  TempDir d;
  strata::OneDeviceStrategy s{strata::cpu(0)};
  auto model = s.scope([] { return strata_test::blobs_mlp(); });
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  nn::TensorBoard quiet{false, d.path / "not_chief", {.update_freq = 1}};
  const auto data = strata_test::blobs(32, 3);
  model.fit(strata::data::from_tensor_slices(data.x, data.y).batch(8),
            {.epochs = 1, .verbose = nn::Verbosity::Silent, .callbacks = {&quiet}});
  CHECK_FALSE(fs::exists(d.path / "not_chief"));
  CHECK(quiet.train_file().empty());
  CHECK_THROWS_WITH_AS(nn::TensorBoard(true, d.path, {.update_freq = -1}), doctest::Contains("update_freq"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(nn::TensorBoard(true, ""), doctest::Contains("log directory is empty"), strata::Error);
}

namespace {

//! Every event file under `dir` (train/ and validation/).
std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const char* sub : {"train", "validation"})
    if (fs::is_directory(dir / sub))
      for (const auto& e : fs::directory_iterator(dir / sub)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

//! The (folder, step, tag, value) lines of the event files under `dir`, as a
//! set, the time-based scalars (per second, ms per step) left out.
std::set<std::string> timeless_scalars(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& l : read_with_protobuf(event_files(dir)))
    if (!l.starts_with("version ") && l.find("_per_second") == std::string::npos &&
        l.find("_ms_per_step") == std::string::npos)
      out.insert(l);
  return out;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// TensorBoard runs on the host, on the logs fit returns: on GPU replicas (stand-ins, tests/device/host_as_gpu.hpp:
// the device executors, the device team's sums) it writes the CPU replicas' scalars at the same steps.
TEST_CASE("TensorBoard on GPU replicas (stand-ins): the CPU replicas' scalars at the same steps, one device and mirrored") {
  const auto train = strata_test::blobs(96, 1), val = strata_test::blobs(32, 2);
  const auto run = [&](auto& s, const fs::path& dir) {
    auto model = s.scope([] { return strata_test::blobs_mlp(); });
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                  {.seed = 7});
    nn::TensorBoard tb{model, dir, {.update_freq = 2}};
    model.fit(s.distribute(strata::data::from_tensor_slices(train.x, train.y).batch(16)),
              {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&tb}},
              s.distribute(strata::data::from_tensor_slices(val.x, val.y).batch(16)));
    return timeless_scalars(dir);
  };
  TempDir d;
  strata::OneDeviceStrategy cpu1{strata::cpu(0)};
  strata::MirroredStrategy cpu2{strata::cpu_replicas(2)};
  const auto want1 = run(cpu1, d.path / "cpu1"), want2 = run(cpu2, d.path / "cpu2");
  CHECK(want2.size() > 10);  // epoch and batch scalars, train and validation
  strata_test::HostAsGpu host;
  strata::OneDeviceStrategy gpu1{strata::gpu(0)};
  strata::MirroredStrategy gpu2{strata::virtual_gpus(0, 2)};
  CHECK(run(gpu1, d.path / "gpu1") == want1);
  CHECK(run(gpu2, d.path / "gpu2") == want2);
}

TEST_CASE("A run stopped mid-epoch three times (kills and a SIGTERM, before and after the resumed run's first row) "
          "writes the uninterrupted run's CSV and TensorBoard scalars") {
  // 6 batches an epoch, 4 epochs, a checkpoint every 2 steps. The stopped run: killed at step 5 (epoch 1,
  // before any row; resumes from step 4), killed at step 9 (after the resumed run wrote epoch 1's row;
  // resumes from step 8), SIGTERM at step 11 (that run's checkpoints of steps 10 and 11 come before its
  // first row; resumes from 11), killed at step 13 (after its first row), then runs to the end.
  const auto train = strata_test::blobs(96, 1), val = strata_test::blobs(32, 2);
  const auto run = [&](auto& s, const fs::path& dir, const std::vector<std::pair<std::int64_t, bool>>& stops) {
    for (std::size_t attempt = 0; attempt <= stops.size(); ++attempt) {
      auto model = s.scope([] { return strata_test::blobs_mlp(); });
      model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                    {.seed = 7});
      nn::BackupAndRestore backup{dir / "ckpt", {.save_every_steps = 2}};
      nn::CSVLogger csv{dir / "history.csv"};
      nn::TensorBoard tb{dir / "tb", {.update_freq = 1, .batch_size = 16}};
      nn::EarlyStopping stop{{.monitor = "loss", .patience = 10}};
      strata_test::StopAtStep killer{attempt < stops.size() ? stops[attempt].first : -1,
                        attempt < stops.size() && stops[attempt].second};
      const nn::FitOptions opts{.epochs = 4, .verbose = nn::Verbosity::Silent,
                                .callbacks = {&backup, &csv, &tb, &stop, &killer}};
      const auto fit = [&] {
        return model.fit(strata::data::from_tensor_slices(train.x, train.y).shuffle(96, 3).batch(16), opts,
                         strata::data::from_tensor_slices(val.x, val.y).batch(16));
      };
      if (attempt == stops.size()) {
        fit();
        return strata_test::flat_weights(model);
      }
      if (stops[attempt].second) CHECK_THROWS_AS(fit(), nn::Preempted);
      else CHECK_THROWS_AS(fit(), strata_test::Crashed);
    }
    return std::vector<float>{};
  };
  strata_test::for_each_strategy({.synchronous = true}, [&](auto& s, const strata::StrategyInfo&) {
    TempDir want, got;
    const auto w_want = run(s, want.path, {});
    const auto w_got = run(s, got.path, {{5, false}, {9, false}, {11, true}, {13, false}});
    CHECK(w_got == w_want);
    const std::string csv_want = read_all(want.path / "history.csv"), csv_got = read_all(got.path / "history.csv");
    CHECK(std::count(csv_want.begin(), csv_want.end(), '\n') == 5);  // the header, 4 epochs
    CHECK(csv_got == csv_want);
    const auto tb_want = timeless_scalars(want.path / "tb"), tb_got = timeless_scalars(got.path / "tb");
    CHECK(tb_want.size() == 24 * 2 + 4 * 3 + 4 * 2);  // each batch's loss and accuracy, the epochs' and the rate
    CHECK(tb_got == tb_want);
    CHECK(event_files(got.path / "tb").size() == 5 + 3);  // a file a run in train/, validation/ from the first row
  });
}
