// MultiWorkerPipelineStrategy under mpirun (2 and 4 ranks): a model's stages
// on the ranks, and D data-parallel copies of them, train to bitwise the
// weights and losses of PipelineStrategy in one process with as many
// replicas and the same options (the same operations in the same order),
// under every schedule; evaluate and predict agree; the whole model and its
// optimizer state reach every rank at epoch ends (a checkpoint of the job
// continues in one process as the job does); a stage that throws stops
// every rank with its error, no hang; a rank count that the copies do not
// divide is an error on every rank.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>

#include "support/blobs.hpp"
#include "support/boom_layer.hpp"
#include "support/identity_layer.hpp"
#include "parallel/tensor/tiny_gpt.hpp"
#include "pipeline_copies.hpp"

#include <unistd.h>

namespace pipeline_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using namespace std::chrono_literals;
using strata::Schedule;

namespace {

// 6 layers, two without parameters, one with L2 (as tests/parallel/pipeline/pipeline_test.cpp).
nn::Sequential mlp() {
  return nn::Sequential{nn::Input{{6}},  nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::ReLU{},      nn::Dense{12},
                        nn::Dense{8},    nn::ReLU{},
                        nn::Dense{3}};
}

int world() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

strata::MpiOptions quick() {
  strata::MpiOptions o;
  o.timeout = 20s;
  return o;
}

struct Run {
  std::vector<float> w;
  std::vector<double> loss;
  double eval_loss = 0;
  std::vector<float> pred;
};

template <class S>
Run train(S& s, std::size_t batch, int epochs) {
  const auto data = strata_test::blobs(203, 11);
  auto model = s.scope(mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 5});
  const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(batch)),
                           {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  Run r;
  for (const auto& logs : h.epochs()) r.loss.push_back(logs.at("loss"));
  r.w = strata_test::flat_weights(model);
  r.eval_loss = model.evaluate(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
                               {.verbose = nn::Verbosity::Silent})
                    .at("loss");
  const auto p = model.predict(s.distribute(strata::data::from_tensor_slices(data.x).batch(32)));
  r.pred.assign(p.data(), p.data() + p.size());
  return r;
}

}  // namespace

TEST_CASE("stages on ranks train bitwise as the same pipeline in one process, every schedule, with copies") {
  const int W = world();
  for (std::size_t D : {std::size_t{1}, std::size_t{2}}) {
    if (W % static_cast<int>(D)) continue;
    for (Schedule k : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB}) {
      CAPTURE(D);
      CAPTURE(strata::to_string(k));
      const strata::PipelineOptions o{.stages = {}, .micro_batches = 3, .schedule = k, .data_parallel = D};
      strata::MultiWorkerPipelineStrategy ranks{quick()};
      ranks.pipeline_options() = o;
      strata::PipelineStrategy threads{strata::cpu_replicas(W)};
      threads.pipeline_options() = o;
      const Run a = train(ranks, 25, 2), b = train(threads, 25, 2);  // a last batch of 3 rows
      CHECK(a.w == b.w);
      CHECK(a.loss == b.loss);
      CHECK(a.eval_loss == b.eval_loss);
      CHECK(a.pred == b.pred);
      REQUIRE(ranks.pipeline_stats().stages.size() == static_cast<std::size_t>(W) / D);
      CHECK(ranks.pipeline_stats().steps == 18);
      for (const auto& st : ranks.pipeline_stats().stages) CHECK(st.wall_s > 0);  // every stage's, on every rank
    }
  }
}

// Compression (ExecutorOptions::compression): the copies of a stage, on ranks, sum their 16-bit gradients
// in an MPI all-reduce; between two copies each element is a + b rounded once, as the threads' sum in
// memory adds them, so the in-process pipeline's bits.
TEST_CASE("compressed copies on ranks sum in 16 bits: the in-process compressed pipeline's bits") {
  const int W = world();
  if (W % 2) return;
  for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
    CAPTURE(strata::to_string(c));
    const strata::PipelineOptions o{.stages = {}, .micro_batches = 3, .data_parallel = 2};
    strata::MultiWorkerPipelineStrategy ranks{quick()};
    ranks.pipeline_options() = o;
    ranks.executor_options().compression = c;
    strata::PipelineStrategy threads{strata::cpu_replicas(W)};
    threads.pipeline_options() = o;
    threads.executor_options().compression = c;
    const Run a = train(ranks, 25, 2), b = train(threads, 25, 2);
    CHECK(a.w == b.w);
    CHECK(a.loss == b.loss);
    strata::PipelineStrategy fp32{strata::cpu_replicas(W)};
    fp32.pipeline_options() = o;
    CHECK(train(fp32, 25, 2).w != a.w);  // rounded: not FP32's bits
  }
}

namespace {

std::atomic<std::uint64_t> most{0};  // buckets this rank had started when its probe's backward ran (most)
std::atomic<int> fail_rank{-1};      // the rank whose probe throws in a backward with buckets under way

//! The identity; in backward, how many gradient buckets this rank started
//! since the probe's last forward (the later layers' of its stage).
class Probe final : public strata_test::Identity<Probe> {
 public:
  [[nodiscard]] std::string kind() const override { return "Probe"; }
  void on_forward(const nn::RunInfo& /*info*/) { at_forward_ = strata::detail::buckets_started_here(); }
  void on_backward() {
    const std::uint64_t started = strata::detail::buckets_started_here() - at_forward_;
    for (std::uint64_t cur = most.load(); started > cur && !most.compare_exchange_weak(cur, started);) {
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == fail_rank.load() && started > 0) throw std::runtime_error("probe: rank " + std::to_string(rank) + " fails");
  }

 private:
  std::uint64_t at_forward_ = 0;
};

//! Layers: Dense 16 (L2) | Probe | Dense 12 || Dense 8 (L2) | ReLU | Dense 3: the probe in stage 0, after
//! the later layers of its stage (of the whole model at one stage).
nn::Sequential probed_mlp() {
  return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        Probe{},        nn::Dense{12},
                        nn::Dense{8, {.l2 = 2e-3f}}, nn::ReLU{},
                        nn::Dense{3}};
}

//! 2 copies of the probed MLP's stages on the ranks (2 epochs of Adam, batches of 25 of 201 rows: the last,
//! of one row, leaves copy 1 an empty share), the copies' sum by buckets of `bytes` (0: flat).
std::vector<float> train_buckets(Schedule k, std::size_t bytes, strata::Compression c, std::string* summary = nullptr) {
  const std::size_t S = static_cast<std::size_t>(world()) / 2;
  strata::MultiWorkerPipelineStrategy s{quick()};
  return strata_test::fit_two_copies(
      s, probed_mlp, S == 1 ? std::vector<strata::Range>{{0, 6}} : std::vector<strata::Range>{{0, 3}, {3, 6}}, k, bytes,
      c, summary);
}

}  // namespace

// Gradient buckets (ExecutorOptions::bucket_bytes) for the copies on ranks: each bucket of a stage's
// gradient all-reduced among its copies as the last micro-batch's backward finishes its layers. Between
// two copies each element is a + b whatever the cut, so the flat sum's bits, compressed or not.
TEST_CASE("the copies' sum by buckets on ranks: the flat sum's bits, the later layers' buckets under way first") {
  const int W = world();
  if (W % 2) return;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::size_t S = static_cast<std::size_t>(W) / 2;
  for (strata::Compression c : {strata::Compression::None, strata::Compression::BF16})
    for (Schedule k : {Schedule::GPipe, Schedule::OneFOneB}) {
      CAPTURE(strata::to_string(c));
      CAPTURE(strata::to_string(k));
      most = 0;
      const auto flat = train_buckets(k, 0, c);
      CHECK(most.load() == 0);  // flat: nothing summed during backward
      // the probe's stage's variables after it, from the end: one stage: b3 k3 b8 k8 b12 k12; two: b12 k12.
      // 1 byte: a bucket each; 128 bytes: {b8 k3 b3} {k8} {b12 k12} (one stage), {b12 k12} (two); 1 MiB: one
      for (std::size_t bytes : {std::size_t{1}, std::size_t{128}, std::size_t{1} << 20}) {
        CAPTURE(bytes);
        most = 0;
        std::string summary;
        CHECK(train_buckets(k, bytes, c, &summary) == flat);
        const std::uint64_t want = bytes == 1 ? (S == 1 ? 6 : 2) : bytes == 128 ? (S == 1 ? 3 : 1) : 0;
        if (static_cast<std::size_t>(rank) % S == 0) CHECK(most.load() == want);  // the probe's stage
        CHECK(summary.find("the copies' sum in ") != std::string::npos);
        CHECK(summary.find("each started as the last micro-batch's backward ends it") != std::string::npos);
      }
    }
}

// Tensor parallelism within the stages (PipelineOptions::tensor_parallel): a
// rank per member; the members' sums over the ranks add in member order as
// the threads' do, so the job gives the in-process pipeline's bits.
TEST_CASE("stages split over ranks by tensor parallelism (D x T x S) train bitwise as the same pipeline in one process") {
  const int W = world();
  const strata_test::Tokens d;
  auto run = [&](auto& s) {
    auto model = s.scope([] { return strata_test::tiny_gpt(); });
    model.compile(nn::AdamW{1e-2f, {.weight_decay = 0.1f, .global_clipnorm = 1.f}},
                  nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 3});
    const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
                             {.epochs = 2, .verbose = nn::Verbosity::Silent});
    Run r;
    r.loss = h.at("loss");
    r.w = strata_test::flat(model.get_weights());
    r.eval_loss = model.evaluate(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
                                 {.verbose = nn::Verbosity::Silent})
                      .at("loss");
    const auto p = model.predict(d.x, 12);
    r.pred.assign(p.data(), p.data() + p.size());
    return std::pair{r, model.gradient_reduction()};
  };
  for (std::size_t D : {std::size_t{1}, std::size_t{2}}) {
    if (W % static_cast<int>(2 * D)) continue;
    CAPTURE(D);
    strata::PipelineOptions o;
    o.micro_batches = 3;
    o.data_parallel = D;
    o.tensor_parallel = 2;
    strata::MultiWorkerPipelineStrategy ranks{quick()};
    ranks.pipeline_options() = o;
    strata::PipelineStrategy threads{strata::cpu_replicas(W)};
    threads.pipeline_options() = o;
    const auto ra = run(ranks);  // (no structured binding: clang 14 cannot capture one in doctest's lambdas)
    const Run& a = ra.first;
    const Run b = run(threads).first;
    CHECK(ra.second.find("1 attention layer split by heads") != std::string::npos);
    CHECK(a.w == b.w);
    CHECK(a.loss == b.loss);
    CHECK(a.eval_loss == b.eval_loss);
    CHECK(a.pred == b.pred);
  }
}

// A stage split by tensor parallelism buckets its copies' sum too: each member over its own layout (the
// same on every copy), as the last micro-batch's backward ends each bucket; between two copies a + b, so the
// flat sum's bits, compressed or not.
TEST_CASE("split stages' copies on ranks by buckets (D x T = 2 x 2): the flat sum's bits") {
  const int W = world();
  if (W % 4) return;
  const strata_test::Tokens d;
  auto run = [&](std::size_t bytes, strata::Compression c, std::string* summary = nullptr) {
    strata::MultiWorkerPipelineStrategy s{quick()};
    s.pipeline_options().micro_batches = 3;
    s.pipeline_options().data_parallel = 2;
    s.pipeline_options().tensor_parallel = 2;
    s.executor_options().bucket_bytes = bytes;
    s.executor_options().compression = c;
    auto model = s.scope([] { return strata_test::tiny_gpt(); });
    model.compile(nn::AdamW{1e-2f, {.weight_decay = 0.1f, .global_clipnorm = 1.f}},
                  nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
              {.epochs = 2, .verbose = nn::Verbosity::Silent});
    if (summary) *summary = model.gradient_reduction();
    return strata_test::flat(model.get_weights());
  };
  for (strata::Compression c : {strata::Compression::None, strata::Compression::BF16}) {
    CAPTURE(strata::to_string(c));
    const auto flat = run(0, c);
    for (std::size_t bytes : {std::size_t{1}, std::size_t{2048}, std::size_t{1} << 20}) {
      CAPTURE(bytes);
      std::string summary;
      CHECK(run(bytes, c, &summary) == flat);
      CHECK_MESSAGE(summary.find("each started as the last micro-batch's backward ends it") != std::string::npos,
                    summary);
    }
  }
}

TEST_CASE("the job's checkpoint, taken at an epoch's end, continues in one process as the job does") {
  const int W = world();
  const auto data = strata_test::blobs(120, 3);
  auto make = [](auto& s) {
    auto m = s.scope(mlp);
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 5});
    return m;
  };
  auto ds = [&] { return strata::data::from_tensor_slices(data.x, data.y).batch(20); };
  strata::MultiWorkerPipelineStrategy ranks{quick()};
  ranks.pipeline_options().micro_batches = 2;
  auto a = make(ranks);
  a.fit(ranks.distribute(ds()), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  long pid = static_cast<long>(::getpid());
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const auto path = std::filesystem::temp_directory_path() / ("strata_mw_pipe_" + std::to_string(pid) + ".strata");
  if (a.is_chief()) a.save_checkpoint(path);
  MPI_Barrier(MPI_COMM_WORLD);
  // one process, the same pipeline: from the checkpoint (weights and Adam's moments of every stage)
  strata::PipelineStrategy threads{strata::cpu_replicas(W)};
  threads.pipeline_options().micro_batches = 2;
  auto b = make(threads);
  b.build(strata::Shape{6});
  b.load_checkpoint(path);
  CHECK(strata_test::flat_weights(b) == strata_test::flat_weights(a));
  a.fit(ranks.distribute(ds()), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  b.fit(threads.distribute(ds()), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  CHECK(strata_test::flat_weights(b) == strata_test::flat_weights(a));
  MPI_Barrier(MPI_COMM_WORLD);
  if (a.is_chief()) std::filesystem::remove(path);
}

using strata_test::Boom;

TEST_CASE("a stage that throws stops every rank with its error, within the timeout") {
  const int W = world();
  const auto data = strata_test::blobs(64, 3);
  const int where = W - 1;  // the last stage's layer throws (one layer per stage)
  strata::MultiWorkerPipelineStrategy ranks{quick()};
  ranks.pipeline_options().micro_batches = 4;
  auto model = ranks.scope([&] {
    nn::Sequential m{nn::Input{{6}}};
    for (int l = 0; l < W; ++l) {
      if (l == where && l > 0) m.add(Boom{2});
      else m.add(nn::Dense{l == W - 1 ? 3u : 6u});
    }
    return m;
  });
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    model.fit(ranks.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
  } catch (const std::exception& e) {
    what = e.what();
  }
  CAPTURE(what);
  CHECK(what.find("boom in stage") != std::string::npos);
  if (W > 1) {
    const int rank = ranks.worker_index();
    if (rank != where) CHECK(what.find("rank " + std::to_string(where) + " (stage " + std::to_string(where)) != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // at once, not at the 20 s timeout
  CHECK(model.iterations() == 2);                      // the two steps before it trained
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("ranks that the copies do not divide, or more stages than layers, are errors on every rank") {
  const int W = world();
  strata::MultiWorkerPipelineStrategy ranks{quick()};
  ranks.pipeline_options().data_parallel = static_cast<std::size_t>(W + 1);
  auto m = ranks.scope(mlp);
  m.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  const std::string want = "ranks do not make data_parallel = " + std::to_string(W + 1);
  CHECK_THROWS_WITH_AS(m.build(strata::Shape{6}), doctest::Contains(want.c_str()), strata::Error);
  strata::MultiWorkerPipelineStrategy tiny{quick()};
  auto two = tiny.scope([] { return nn::Sequential{nn::Input{{6}}, nn::Dense{3}}; });  // 1 layer
  two.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  if (W > 1) CHECK_THROWS_AS(two.build(strata::Shape{6}), strata::Error);
}

// A failed job's messages no one took stay on communicators never freed (comm/mpi/notices.hpp):
// cases after this one start clean (run before the others, it passed 16 runs of 16 at np4).
TEST_CASE("a copy failing with the copies' buckets under way is named on every rank, within the timeout") {
  const int W = world();
  if (W % 2) return;
  const int S = W / 2;
  fail_rank = S;  // copy 1 of stage 0, in the backward of its probe after its later layers' buckets started
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    train_buckets(Schedule::OneFOneB, 1, strata::Compression::None);
  } catch (const std::exception& e) {
    what = e.what();
  }
  fail_rank = -1;
  CAPTURE(what);
  CHECK(what.find("probe: rank " + std::to_string(S) + " fails") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // at once, not at the 20 s timeout
  MPI_Barrier(MPI_COMM_WORLD);
}

// The dispatch point (parallel/dispatch.hpp) refuses on ranks what it refuses in one process: a pipeline's
// stages are split by PipelineOptions::tensor_parallel, not ExecutorOptions' (ignored before the dispatch
// point, which the multi-worker strategies' own make_executor bypassed), and captured steps.
TEST_CASE("a pipeline on ranks refuses ExecutorOptions::tensor_parallel and capture_steps, naming the fix") {
  auto make = [] { return nn::Sequential{nn::Input{{6}}, nn::Dense{4}, nn::Dense{3}}; };
  {
    strata::MultiWorkerPipelineStrategy s{quick()};
    s.executor_options().tensor_parallel = 2;
    CHECK_THROWS_WITH_AS(s.scope(make), doctest::Contains("s.pipeline_options().tensor_parallel = T"), strata::Error);
  }
  {
    strata::MultiWorkerPipelineStrategy s{quick()};
    s.executor_options().capture_steps = true;
    CHECK_THROWS_WITH_AS(s.scope(make), doctest::Contains("captured steps run under OneDeviceStrategy on a GPU"),
                         strata::Error);
  }
  strata::MultiWorkerPipelineStrategy s{quick()};  // left at their defaults: a model is made
  CHECK_NOTHROW(s.scope(make));
}

}  // namespace pipeline_test
