// MultiWorkerPipelineStrategy with each rank's stage on a GPU (issue 22):
// the pipeline executor's GPU stages (parallel/pipeline/pipeline_executor.hpp) on MPI
// ranks, on the host's compute standing in for each rank's GPU
// (tests/device/host_as_gpu.hpp): activations cross ranks through host memory
// (downloaded, sent, uploaded), and the job trains to bitwise the weights,
// losses, evaluation and predictions of the CPU pipeline in one process
// with as many stages; a label that is no class index stops every rank;
// two copies of the stages sum by buckets as the CPU stages do.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "pipeline_copies.hpp"

namespace pipeline_gpu_test {  // each test file in its own namespace (tests/meson.build's unity builds)

namespace nn = strata::nn;
using namespace std::chrono_literals;
using strata::Schedule;

namespace {

nn::Sequential mlp() {
  return nn::Sequential{nn::Input{{6}},  nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        nn::ReLU{},      nn::Dense{12},
                        nn::Dense{8},    nn::ReLU{},
                        nn::Dense{3}};
}

int rank_and_world(int* world) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, world);
  return r;
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
Run train(S& s) {
  const auto data = strata_test::blobs(203, 11);
  auto model = s.scope(mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 5});
  const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(25)),
                           {.epochs = 2, .verbose = nn::Verbosity::Silent});
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

// The copies' sum by buckets on GPU stages (issue 25): each bucket fetched from the stage's GPU memory to the
// host as it starts, all-reduced among the copies' ranks, the summed gradient uploaded before the update.
// Between two copies each element is a + b whatever the cut: the CPU stages' flat bits, compressed or not,
// an empty share's zero gradient included.
TEST_CASE("GPU stages' copies on ranks sum by buckets (host compute): the CPU stages' flat bits") {
  int W = 1;
  const int rank = rank_and_world(&W);
  if (W % 2) return;
  for (strata::Compression c : {strata::Compression::None, strata::Compression::BF16}) {
    CAPTURE(strata::to_string(c));
    strata::MultiWorkerPipelineStrategy cpu{quick()};
    const std::vector<float> want = strata_test::fit_two_copies(cpu, mlp, {}, Schedule::OneFOneB, 0, c);
    strata_test::HostAsGpu host;
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{128}, std::size_t{1} << 20}) {
      CAPTURE(bytes);
      strata::MultiWorkerPipelineStrategy gpu{strata::gpu(rank), quick()};
      std::string summary;
      CHECK(strata_test::fit_two_copies(gpu, mlp, {}, Schedule::OneFOneB, bytes, c, &summary) == want);
      if (bytes)
        CHECK_MESSAGE(summary.find("each started as the last micro-batch's backward ends it") != std::string::npos,
                      summary);
    }
  }
}

TEST_CASE("stages on the ranks' GPUs (host compute) train bitwise as the CPU pipeline in one process") {
  int W = 1;
  const int rank = rank_and_world(&W);
  for (Schedule k : {Schedule::GPipe, Schedule::OneFOneB}) {
    CAPTURE(strata::to_string(k));
    const strata::PipelineOptions o{.stages = {}, .micro_batches = 3, .schedule = k};
    strata::PipelineStrategy threads{strata::cpu_replicas(W)};
    threads.pipeline_options() = o;
    const Run b = train(threads);
    strata_test::HostAsGpu host;
    strata::MultiWorkerPipelineStrategy ranks{strata::gpu(rank), quick()};
    ranks.pipeline_options() = o;
    CHECK(ranks.devices().front() == strata::gpu(rank));
    const Run a = train(ranks);
    CHECK(a.w == b.w);
    CHECK(a.loss == b.loss);
    CHECK(a.eval_loss == b.eval_loss);
    CHECK(a.pred == b.pred);
  }
}

TEST_CASE("a GPU stage's invalid label on one rank stops every rank with its error") {
  int W = 1;
  const int rank = rank_and_world(&W);
  strata_test::HostAsGpu host;
  auto bad = strata_test::blobs(64, 3);
  bad.y[16 + 5] = 99;
  strata::MultiWorkerPipelineStrategy ranks{strata::gpu(rank), quick()};
  ranks.pipeline_options().micro_batches = 2;
  auto model = ranks.scope(mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  const auto started = std::chrono::steady_clock::now();
  try {
    model.fit(ranks.distribute(strata::data::from_tensor_slices(bad.x, bad.y).batch(16)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
    FAIL("no error");
  } catch (const strata::Error& e) {
    INFO(std::string(e.what()));
    CHECK(std::string(e.what()).find("class ind") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - started < 10s);  // the timeout is 20 s
}

}  // namespace pipeline_gpu_test
