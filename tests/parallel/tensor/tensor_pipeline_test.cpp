// Tensor parallelism with pipeline stages (D x T x S, issue 26):
// PipelineOptions::tensor_parallel splits each stage of a PipelineStrategy
// over T replicas. A small GPT over 2 and 3 stages of 2 members, alone and in
// 2 copies, gives the one-replica result within float rounding and repeats
// bitwise; a Dense pair a stage boundary cuts stays whole; checkpoints are
// logical (a run at S x T continues at one replica and at T alone); evaluate
// and predict give one replica's results; what cannot be split is refused.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "device/host_as_gpu.hpp"
#include "parallel/tensor/tiny_gpt.hpp"

namespace tensor_pipeline_test {

namespace nn = strata::nn;
using strata::Tensor;
using strata_test::flat;
using strata_test::max_diff;
using strata_test::Tokens;

struct Shape3 {
  std::size_t D = 1, S = 1, T = 1;
};

struct Run {
  std::vector<float> weights;
  std::vector<double> losses;
  std::string choice, layout;
};

void compile(nn::Model& model, bool sgd) {
  if (sgd)
    model.compile(nn::SGD{0.5}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 3});
  else
    model.compile(nn::AdamW{1e-2f, {.weight_decay = 0.1f, .global_clipnorm = 1.f}},
                  nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 3});
}

// The tiny GPT on D x S x T replicas of `devices` (S = 1, T = 1: one replica), 3
// micro-batches per batch of 12; `epochs` of AdamW with global-norm clipping,
// or one step of SGD.
Run train_on(std::vector<strata::Device> devices, Shape3 k, int epochs = 2, bool sgd = false) {
  const Tokens d;
  auto fit = [&](auto& s) {
    auto model = s.scope([] { return strata_test::tiny_gpt(); });
    compile(model, sgd);
    const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
                             {.epochs = epochs, .verbose = nn::Verbosity::Silent, .steps_per_epoch = sgd ? 1u : 0u});
    return Run{flat(model.get_weights()), h.at("loss"), model.gradient_reduction(), {}};
  };
  if (k.S == 1 && k.T == 1 && k.D == 1) {
    strata::MirroredStrategy s{std::move(devices)};
    return fit(s);
  }
  strata::PipelineStrategy s{std::move(devices)};
  s.pipeline_options().micro_batches = 3;
  s.pipeline_options().data_parallel = k.D;
  s.pipeline_options().tensor_parallel = k.T;
  return fit(s);
}
Run train(Shape3 k, int epochs = 2, bool sgd = false) {
  return train_on(strata::cpu_replicas(static_cast<int>(k.D * k.S * k.T)), k, epochs, sgd);
}

TEST_CASE("D x T x S: a GPT over 2 and 3 stages of T = 2, alone and in 2 copies, trains as one replica and repeats") {
  const Run one = train({}), first = train({}, 1, true);
  for (Shape3 k : {Shape3{1, 2, 2}, Shape3{2, 2, 2}, Shape3{1, 3, 2}, Shape3{1, 2, 4}}) {
    INFO("D = ", k.D, ", S = ", k.S, ", T = ", k.T);
    CHECK(max_diff(train(k, 1, true).weights, first.weights) < 1e-6f);
    const Run r = train(k);
    CHECK(r.choice.find("1 attention layer split by heads, 1 Dense pair split column then row") != std::string::npos);
    CHECK(r.choice.find("within each of " + std::to_string(k.S) + " pipeline stages") != std::string::npos);
    CHECK(max_diff(r.weights, one.weights) < 2e-4f);
    REQUIRE(r.losses.size() == one.losses.size());
    for (std::size_t e = 0; e < one.losses.size(); ++e) CHECK(r.losses[e] == doctest::Approx(one.losses[e]).epsilon(1e-5));
    CHECK(train(k).weights == r.weights);  // run to run, bitwise
  }
}

TEST_CASE("D x T x S: the pipeline at T = 2 agrees with tensor parallelism alone at T = 2 on one SGD step") {
  // the same split products, the same sums: only the stage boundaries differ
  strata::MirroredStrategy tp{strata::cpu_replicas(2)};
  tp.executor_options().tensor_parallel = 2;
  const Tokens d;
  auto model = tp.scope([] { return strata_test::tiny_gpt(); });
  compile(model, true);
  model.fit(tp.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
            {.epochs = 1, .verbose = nn::Verbosity::Silent, .steps_per_epoch = 1});
  CHECK(max_diff(train({1, 2, 2}, 1, true).weights, flat(model.get_weights())) < 1e-6f);
}

// An MLP whose first two Dense layers make the one pair T = 2 can split:
// split when a stage holds both, whole when a stage boundary falls between them.
nn::Sequential mlp() {
  nn::Sequential m;
  m.add(nn::Input{{6}});
  m.add(nn::Dense{16, {.activation = nn::Activation::ReLU}});
  m.add(nn::Dense{5, {.activation = nn::Activation::ReLU}});  // 5 units: no pair with the next at T = 2
  m.add(nn::Dense{3});
  return m;
}

TEST_CASE("D x T x S: a Dense pair a stage boundary cuts stays whole; one stage holding it splits it") {
  Tensor<float> x{{30, 6}}, y{{30, 1}};
  for (std::size_t i = 0; i < 30; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = std::sin(static_cast<float>(i * 6 + j));
    y[i] = static_cast<float>(i % 3);
  }
  auto run = [&](std::vector<strata::Range> stages, std::size_t T) {
    strata::PipelineStrategy s{strata::cpu_replicas(static_cast<int>(stages.size() * T))};
    s.pipeline_options().stages = std::move(stages);
    s.pipeline_options().micro_batches = 2;
    s.pipeline_options().tensor_parallel = T;
    auto model = s.scope([] { return mlp(); });
    model.compile(nn::SGD{0.3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 9});
    model.fit(s.distribute(strata::data::from_tensor_slices(x, y).batch(10)), {.epochs = 2, .verbose = nn::Verbosity::Silent});
    return std::pair{flat(model.get_weights()), model.gradient_reduction()};
  };
  strata::MirroredStrategy one{strata::cpu_replicas(1)};
  auto model = one.scope([] { return mlp(); });
  model.compile(nn::SGD{0.3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 9});
  model.fit(one.distribute(strata::data::from_tensor_slices(x, y).batch(10)), {.epochs = 2, .verbose = nn::Verbosity::Silent});
  const auto want = flat(model.get_weights());

  // (no structured bindings: clang 14 cannot capture one in doctest's message lambda)
  const auto cut = run({{0, 1}, {1, 3}}, 2);
  CHECK_MESSAGE(cut.second.find("no layer splits") != std::string::npos, cut.second);
  CHECK(cut.first == run({{0, 1}, {1, 3}}, 1).first);  // whole layers: the plain pipeline's bits
  const auto kept = run({{0, 2}, {2, 3}}, 2);
  CHECK_MESSAGE(kept.second.find("1 Dense pair split column then row") != std::string::npos, kept.second);
  CHECK(max_diff(kept.first, want) < 1e-5f);
  CHECK(max_diff(cut.first, want) < 1e-5f);
}

TEST_CASE("D x T x S: weights read back whole, evaluate and predict as one replica, checkpoints continue at T = 1") {
  const Tokens d;
  const auto dir = std::filesystem::temp_directory_path() / "strata_tensor_pipeline_ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  strata::PipelineStrategy s{strata::cpu_replicas(8)};
  s.pipeline_options().micro_batches = 2;
  s.pipeline_options().data_parallel = 2;
  s.pipeline_options().tensor_parallel = 2;
  auto model = s.scope([] { return strata_test::tiny_gpt(); });
  compile(model, false);
  auto data = strata::data::from_tensor_slices(d.x, d.y).batch(12);
  model.fit(s.distribute(data), {.epochs = 1, .verbose = nn::Verbosity::Silent});

  // the same weights in a one-replica model: the same evaluation and predictions
  strata::MirroredStrategy one{strata::cpu_replicas(1)};
  auto same = one.scope([] { return strata_test::tiny_gpt(); });
  compile(same, false);
  same.build(strata::Shape{8});
  same.set_weights(model.get_weights());
  const auto ev = model.evaluate(s.distribute(data), {.verbose = nn::Verbosity::Silent});
  const auto ev1 = same.evaluate(one.distribute(data), {.verbose = nn::Verbosity::Silent});
  CHECK(ev.at("loss") == doctest::Approx(ev1.at("loss")).epsilon(1e-5));
  CHECK(ev.at("accuracy") == doctest::Approx(ev1.at("accuracy")));
  const Tensor<float> p = model.predict(d.x, 12), p1 = same.predict(d.x, 12);
  REQUIRE(p.size() == p1.size());
  float worst = 0;
  for (std::size_t i = 0; i < p.size(); ++i) worst = std::max(worst, std::fabs(p[i] - p1[i]));
  CHECK(worst < 1e-4f);

  // weights set at S x T read back exactly
  auto ws = model.get_weights();
  for (auto& w : ws)
    for (float& v : w.value) v = v * 0.5f + 0.25f;
  model.set_weights(ws);
  CHECK(flat(model.get_weights()) == flat(ws));

  // a checkpoint (weights and AdamW state) continues at one replica and at T = 4 alone as the run at D x S x T does
  model.save_checkpoint((dir / "ckpt").string());
  model.fit(s.distribute(data), {.epochs = 1, .verbose = nn::Verbosity::Silent});
  auto continued = [&](strata::MirroredStrategy& st) {
    auto resumed = st.scope([] { return strata_test::tiny_gpt(); });
    compile(resumed, false);
    resumed.build(strata::Shape{8});
    resumed.load_checkpoint((dir / "ckpt").string());
    CHECK(resumed.iterations() == 4);
    resumed.fit(st.distribute(data), {.epochs = 1, .verbose = nn::Verbosity::Silent});
    return flat(resumed.get_weights());
  };
  strata::MirroredStrategy t4{strata::cpu_replicas(4)};
  t4.executor_options().tensor_parallel = 4;
  CHECK(max_diff(continued(one), flat(model.get_weights())) < 2e-4f);
  CHECK(max_diff(continued(t4), flat(model.get_weights())) < 2e-4f);
  std::filesystem::remove_all(dir);
}

TEST_CASE("D x T x S: what cannot be split is refused with a sentence") {
  auto refused = [](int replicas, std::size_t T, std::size_t heads, const std::string& words) {
    strata::PipelineStrategy s{strata::cpu_replicas(replicas)};
    s.pipeline_options().tensor_parallel = T;
    const std::string what = strata_test::build_error(s, heads);
    CHECK_MESSAGE(what.find(words) != std::string::npos, what);
  };
  refused(6, 3, 4, "has 4 heads: they cannot be split evenly over 3");
  refused(5, 2, 4, "5 replicas do not make data_parallel = 1 copies of a pipeline whose stages "
                                        "are split over tensor_parallel = 2");
  refused(4, 0, 4, "tensor_parallel is 0");
  strata::PipelineStrategy s{strata::cpu_replicas(4)};
  s.executor_options().tensor_parallel = 2;
  CHECK_THROWS_WITH_AS(s.scope([] { return strata_test::tiny_gpt(); }),
                       doctest::Contains("PipelineOptions::tensor_parallel"), strata::Error);
}

// A member that does not come to the step's sums is named by the others within
// the deadline; one that fails releases them at once with its message (no hang).
TEST_CASE("D x T x S: a stalled member is named within the deadline, a failed one releases the others") {
  using namespace std::chrono_literals;
  auto run = [](std::chrono::milliseconds timeout, auto&& hook) {
    strata::PipelineStrategy s{strata::cpu_replicas(8), strata::CommOptions{.timeout = timeout}};
    s.pipeline_options().micro_batches = 2;
    s.pipeline_options().data_parallel = 2;
    s.pipeline_options().tensor_parallel = 2;
    return strata_test::steps_until_error(s, hook);
  };
  // lane 1: member 1 of stage 0 of copy 0
  const std::string stalled = run(1000ms, [](strata::ReplicaGradient& g) {
                                if (g.replica == 1) std::this_thread::sleep_for(3000ms);
                              }).first;
  CHECK_MESSAGE(stalled.find("timed out after 1000 ms") != std::string::npos, stalled);
  CHECK_MESSAGE(stalled.find("replica 1") != std::string::npos, stalled);
  const auto failed = run(8000ms, [](strata::ReplicaGradient& g) {
    if (g.replica == 1) throw std::runtime_error("member 1 gave up");
  });
  CHECK_MESSAGE(failed.first.find("member 1 gave up") != std::string::npos, failed.first);
  CHECK(failed.second < 6000ms);  // at once, not after the deadline (8 s)
}

// The host's compute standing in for a device's, its memory said to be a
// GPU's: the group's sums go through host memory as a GPU's would.
struct DeviceLikeCompute : strata::kernels::HostCompute {
  [[nodiscard]] strata::kernels::Where where() const noexcept override { return strata::kernels::Where::Cuda; }
};

// GPU stages run the executor's GPU path (their own computes and buffers,
// gradients staged for the sums and the counts): on the host's compute they
// give the CPU stages' bits.
TEST_CASE("D x T x S on GPU stages (the host's compute standing in) gives the CPU stages' bits") {
  for (Shape3 k : {Shape3{1, 2, 2}, Shape3{2, 2, 2}}) {
    INFO("D = ", k.D, ", S = ", k.S, ", T = ", k.T);
    const int n = static_cast<int>(k.D * k.S * k.T);
    std::vector<strata::Device> devices;
    for (int i = 0; i < n; ++i) devices.push_back(strata::gpu(i));
    const Run cpu = train(k);
    {
      strata_test::HostAsGpu host;
      const Run gpu = train_on(devices, k);
      CHECK(gpu.weights == cpu.weights);
      CHECK(gpu.losses == cpu.losses);
    }
    {
      strata_test::HostAsGpu host;
      strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
        return std::make_unique<DeviceLikeCompute>();
      };
      const Run staged = train_on(devices, k);
      CHECK(staged.weights == cpu.weights);
      CHECK(staged.losses == cpu.losses);
    }
  }
}

}  // namespace tensor_pipeline_test
