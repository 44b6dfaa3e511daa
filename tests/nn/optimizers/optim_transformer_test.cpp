// The training pieces a transformer needs (issue 26): AdamW (decoupled
// weight decay), the warm-up + cosine learning-rate schedule, and clipping
// by the global norm under every synchronous strategy (the norm reduced
// across replicas, ZeRO shards and pipeline stages), the parameter server
// (each push clipped by its own norm) and the GPU executors (on the host's
// compute standing in for a GPU, eager and captured).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include <strata/kernels/bodies/optim.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/kernels/host/optim.hpp>
#include <strata/kernels/step_state.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"

namespace optim_transformer_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
namespace kb = strata::kernels::bodies;

namespace {

std::vector<float> ramp(std::size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i) + shift);
  return v;
}

// `steps` updates of `opt` on w from gradients g_t = ramp(t), on the host.
std::vector<float> run_optimizer(const nn::Optimizer& opt, std::size_t n, int steps) {
  std::vector<float> w = ramp(n, 0.5f, 1.f);
  nn::OptimizerState st = opt.make_state(n);
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> g = ramp(n, 0.1f * static_cast<float>(t + 1), static_cast<float>(t));
    opt.apply(w, g, st, 0, t);
  }
  return w;
}

// 48 rows in batches of 16 (uneven splits at 3 replicas are not needed here).
const strata_test::Blobs& data() {
  static const strata_test::Blobs d = strata_test::blobs(48, 5);
  return d;
}
auto dataset() { return strata::data::from_tensor_slices(data().x, data().y).batch(16); }

// An MLP without dropout (its masks are keyed by replica): the runs at 1 and 2 replicas take the same steps.
nn::Sequential mlp() {
  return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dense{8},
                        nn::ReLU{}, nn::Dense{3}};
}

constexpr int epochs = 2;

// Adam (lr 0.02) with global_clipnorm `clip` (0: none), trained by fit under `s`.
template <class S, class Opt = nn::Adam>
std::vector<float> fit(S& s, float clip, std::optional<Opt> opt = std::nullopt) {
  auto model = s.scope(mlp);
  model.compile(opt ? *opt : Opt{0.02, {.global_clipnorm = clip}},
                nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  model.fit(s.distribute(dataset()), {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  return strata_test::flat_weights(model);
}

// The reference: one replica, no clipping by the optimizer, each step's
// gradient scaled by hand before the update (a custom loop's hook).
std::vector<float> clipped_by_hand(float clip) {
  strata::OneDeviceStrategy s{strata::cpu(0)};
  auto model = s.scope(mlp);
  model.compile(nn::Adam{0.02}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  int clipped = 0;
  auto hook = [&](strata::ReplicaGradient& g) {
    REQUIRE(g.values.size() == g.params);  // one replica: the whole gradient
    // the norm as documented: the squares added in double (Compute::square_sum's order)
    const double sq = strata::kernels::host::square_sum(g.values.data(), g.values.size());
    double naive = 0;
    for (float v : g.values) naive += static_cast<double>(v) * v;
    CHECK(sq == doctest::Approx(naive).epsilon(1e-12));
    const double norm = std::sqrt(sq);
    if (norm <= clip) return;
    ++clipped;
    const auto f = static_cast<float>(static_cast<double>(clip) / norm);
    for (float& v : g.values) v *= f;
  };
  auto train = s.distribute(dataset());
  for (int e = 0; e < epochs; ++e)
    for (const auto& batch : train) model.train_step(batch, hook);
  CHECK(clipped > 0);  // the clip is small enough to act
  return strata_test::flat_weights(model);
}

void close(const std::vector<float>& a, const std::vector<float>& b, double eps = 2e-5) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  CHECK(worst < eps);
}

constexpr float small_clip = 0.05f;  // below every step's norm here
constexpr float huge_clip = 1e30f;   // never reached

}  // namespace

// -- AdamW ---------------------------------------------------------------------

TEST_CASE("AdamW with weight_decay = 0 gives Adam's bits; with decay, the decoupled form step by step") {
  for (std::size_t n : {1u, 7u, 64u, 203u}) {  // the SSE path and its tail
    CHECK(run_optimizer(nn::AdamW{1e-2, {.weight_decay = 0.f}}, n, 5) == run_optimizer(nn::Adam{1e-2}, n, 5));
    CHECK(run_optimizer(nn::AdamW{nn::CosineDecay{0.02f, 4}, {.weight_decay = 0.f}}, n, 6) ==
          run_optimizer(nn::Adam{nn::CosineDecay{0.02f, 4}}, n, 6));
  }
  // one step by hand: w *= 1 - lr wd, then Adam's update with its bias correction folded in
  const float lr = 0.01f, wd = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-7f;
  nn::AdamW opt{lr, {.weight_decay = wd}};
  std::vector<float> w{0.5f, -2.f, 3.f}, g{0.1f, 0.2f, -0.3f};
  nn::OptimizerState st = opt.make_state(3);
  const std::vector<float> w0 = w;
  opt.apply(w, g, st, 0, 0);
  const auto lr_t = static_cast<float>(lr * std::sqrt(1.0 - b2) / (1.0 - b1));
  CHECK(opt.step_rate(0) == lr_t);
  CHECK(opt.decay(0) == static_cast<float>(1.0 - static_cast<double>(lr) * wd));
  for (std::size_t i = 0; i < 3; ++i) {
    const float m = (1.f - b1) * g[i], v = (1.f - b2) * g[i] * g[i];
    const float want = w0[i] * opt.decay(0) - lr_t * m / (std::sqrt(v) + eps);
    CHECK(w[i] == want);
  }
  // a weight with zero gradient only decays
  std::vector<float> z{4.f}, zg{0.f};
  nn::OptimizerState zs = opt.make_state(1);
  opt.apply(z, zg, zs, 0, 0);
  CHECK(z[0] == 4.f * opt.decay(0));
}

TEST_CASE("AdamW is elementwise: any slicing of the update gives the whole update's bits") {
  const nn::AdamW opt{3e-3, {.weight_decay = 0.05f}};
  const std::size_t n = 101;
  std::vector<float> whole = ramp(n, 1.f, 0.f), sliced = whole;
  nn::OptimizerState a = opt.make_state(n), b = opt.make_state(n);
  for (int t = 0; t < 3; ++t) {
    const std::vector<float> g = ramp(n, 0.2f, static_cast<float>(t));
    opt.apply(whole, g, a, 0, t);
    for (std::size_t at = 0; at < n; at += 13) {
      const std::size_t len = std::min<std::size_t>(13, n - at);
      opt.apply(std::span<float>(sliced).subspan(at, len), std::span<const float>(g).subspan(at, len), b, at, t);
    }
  }
  CHECK(whole == sliced);
}

TEST_CASE("AdamW's captured form (decays from the state's table, the rate from the step's) gives the eager bits") {
  const nn::AdamW opt{nn::CosineDecay{.initial = 0.f, .decay_steps = 5, .warmup_target = 0.01f, .warmup_steps = 2},
                      {.weight_decay = 0.2f}};
  const std::size_t n = 37;
  std::vector<float> eager = ramp(n, 1.f, 0.f), captured = eager;
  nn::OptimizerState a = opt.make_state(n), b = opt.make_state(n);
  CHECK_THROWS_WITH_AS(opt.apply_at(captured, ramp(n, 1.f, 0.f), b, 0, {}), doctest::Contains("prepare_steps"),
                       strata::Error);
  strata::kernels::StepCounters counters;
  strata::kernels::RateTable rates;
  rates.base = 0;
  rates.count = 8;
  for (std::size_t k = 0; k < rates.count; ++k) rates.rate[k] = opt.step_rate(static_cast<std::int64_t>(k));
  opt.prepare_steps(b, 0, rates.count);
  for (int t = 0; t < 8; ++t) {
    const std::vector<float> g = ramp(n, 0.3f, static_cast<float>(t));
    opt.apply(eager, g, a, 0, t);
    counters.iteration = static_cast<std::uint64_t>(t);
    opt.apply_at(captured, g, b, 0, {&counters, &rates, false});
  }
  CHECK(eager == captured);
  CHECK(eager != ramp(n, 1.f, 0.f));
}

TEST_CASE("describe() names AdamW's hyper-parameters, and global_clipnorm only when set (fingerprints stay)") {
  CHECK(nn::AdamW{1e-3}.describe() ==
        "AdamW(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07, weight_decay=0.01)");
  CHECK(nn::Adam{1e-3}.describe() == "Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07)");
  CHECK(nn::Adam{1e-3, {.global_clipnorm = 1.f}}.describe() ==
        "Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07, global_clipnorm=1)");
  CHECK(nn::SGD{0.1, {.global_clipnorm = 0.5f}}.describe() ==
        "SGD(learning_rate=0.1, momentum=0, nesterov=0, global_clipnorm=0.5)");
  CHECK(nn::SGD{0.1, {.global_clipnorm = 0.5f}}.global_clipnorm() == 0.5f);
  CHECK(nn::AdamW{1e-3}.clone()->global_clipnorm() == 0.f);
  CHECK(nn::AdamW{1e-3, {.global_clipnorm = 2.f}}.clone()->global_clipnorm() == 2.f);
  CHECK_THROWS_WITH_AS(nn::AdamW(1e-3, {.weight_decay = -1.f}), doctest::Contains("weight_decay"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::Adam(1e-3, {.global_clipnorm = -1.f}), doctest::Contains("global_clipnorm"), strata::Error);
  CHECK_THROWS_WITH_AS(nn::SGD(0.1, {.global_clipnorm = INFINITY}), doctest::Contains("global_clipnorm"),
                       strata::Error);
}

// -- the warm-up + cosine schedule ----------------------------------------------

TEST_CASE("CosineDecay: linear warm-up to the target, cosine to alpha times it, flat past the end") {
  const nn::CosineDecay s{.initial = 0.001f, .decay_steps = 100, .alpha = 0.1f, .warmup_target = 0.011f,
                          .warmup_steps = 10};
  CHECK(s(0) == 0.001f);                                                      // warm-up start
  CHECK(s(5) == doctest::Approx(0.006).epsilon(1e-6));                        // half-way up
  CHECK(s(10) == 0.011f);                                                     // the peak
  CHECK(s(60) == doctest::Approx(0.011 * (0.9 * 0.5 + 0.1)).epsilon(1e-6));   // half-way down: cos(pi/2) = 0
  CHECK(s(35) == doctest::Approx(0.011 * (0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)) + 0.1)).epsilon(1e-6));
  CHECK(s(110) == doctest::Approx(0.0011).epsilon(1e-6));                    // the end: alpha * target
  CHECK(s(1000) == s(110));                                                   // past the end
  // without warm-up: Keras' plain CosineDecay from `initial`
  const nn::CosineDecay plain{.initial = 0.1f, .decay_steps = 10};
  CHECK(plain(0) == 0.1f);
  CHECK(plain(5) == doctest::Approx(0.05).epsilon(1e-6));
  CHECK(plain(10) == 0.f);
  CHECK_THROWS_WITH_AS((nn::CosineDecay{.initial = 0.1f, .decay_steps = 0}(0)), doctest::Contains("decay_steps"), strata::Error);
  CHECK_THROWS_WITH_AS((nn::CosineDecay{.initial = 0.f, .decay_steps = 5, .warmup_steps = 3}(0)),
                       doctest::Contains("warmup_target"), strata::Error);
  // through LearningRate, as every optimizer takes it
  const nn::LearningRate lr{s};
  CHECK(lr(10) == 0.011f);
  CHECK(nn::SGD{s}.step_rate(60) == s(60));
}

// -- clipping by the global norm --------------------------------------------------

TEST_CASE("the clip factor and the fixed-order sum of squares") {
  CHECK(kb::clip_factor(4.0, 1.f) == 0.5f);
  CHECK(kb::clip_factor(1.0, 1.f) == 1.f);  // at the norm: untouched
  CHECK(kb::clip_factor(0.25, 1.f) == 1.f);
  CHECK(kb::clip_factor(INFINITY, 1.f) == 1.f);  // non-finite: left to the finiteness check
  CHECK(kb::clip_factor(NAN, 1.f) == 1.f);
  std::vector<float> x = ramp(1000, 1.f, 0.f);
  double naive = 0;
  for (float v : x) naive += static_cast<double>(v) * v;
  CHECK(strata::kernels::host::square_sum(x.data(), x.size()) == doctest::Approx(naive).epsilon(1e-13));
  CHECK(strata::kernels::host::square_sum(x.data(), 0) == 0.0);
  auto& c = strata::kernels::host_compute();
  double sq = 0;
  c.square_sum(x.data(), x.size(), &sq);
  std::vector<float> y = x;
  c.clip_by_norm(y.data(), y.size(), 1.f, &sq);
  const float f = kb::clip_factor(sq, 1.f);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(y[i] == x[i] * f);
}

TEST_CASE("a clipped run is the run whose gradient was scaled by hand (one replica: bitwise)") {
  const std::vector<float> by_hand = clipped_by_hand(small_clip);
  strata::OneDeviceStrategy one{strata::cpu(0)};
  const std::vector<float> clipped = fit(one, small_clip);
  CHECK(clipped == by_hand);
  strata::OneDeviceStrategy again{strata::cpu(0)};
  CHECK(fit(again, 0.f) != clipped);  // the clip acted
  SUBCASE("a clip never reached gives the unclipped bits") {
    strata::OneDeviceStrategy a{strata::cpu(0)}, b{strata::cpu(0)};
    CHECK(fit(a, huge_clip) == fit(b, 0.f));
  }
}

TEST_CASE("the norm is global: 2 replicas, ZeRO 1/2/3, central storage and 2 pipeline stages give one replica's clip") {
  strata::OneDeviceStrategy one{strata::cpu(0)};
  const std::vector<float> want = fit(one, small_clip);
  SUBCASE("mirrored, 2 replicas") {
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    s.executor_options().sharded_update = strata::ShardedUpdate::Off;
    close(fit(s, small_clip), want);
  }
  for (auto mode : {strata::ShardedUpdate::On, strata::ShardedUpdate::Gradients, strata::ShardedUpdate::Parameters}) {
    CAPTURE(static_cast<int>(mode));
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    s.executor_options().sharded_update = mode;
    const std::vector<float> got = fit(s, small_clip);
    close(got, want);
    strata::MirroredStrategy t{strata::cpu_replicas(2)}, u{strata::cpu_replicas(2)};
    t.executor_options().sharded_update = mode;
    u.executor_options().sharded_update = mode;
    CHECK(fit(t, huge_clip) == fit(u, 0.f));  // never reached: bitwise unclipped
  }
  SUBCASE("central storage, 2 replicas") {
    strata::CentralStorageStrategy s{strata::cpu_replicas(2)};
    close(fit(s, small_clip), want);
  }
  SUBCASE("pipeline, 2 stages (and 2 copies of them)") {
    strata::PipelineStrategy s{strata::cpu_replicas(2)};
    s.pipeline_options().micro_batches = 2;
    close(fit(s, small_clip), want);
    strata::PipelineStrategy t{strata::cpu_replicas(2)}, u{strata::cpu_replicas(2)};
    CHECK(fit(t, huge_clip) == fit(u, 0.f));
    strata::PipelineStrategy dp{strata::cpu_replicas(4)};
    dp.pipeline_options().data_parallel = 2;
    close(fit(dp, small_clip), want);
  }
}

TEST_CASE("GPU executors clip on the device (the host's compute in its place): the CPU's bits, eager and captured") {
  strata_test::HostAsGpu host_as_gpu;
  strata::OneDeviceStrategy cpu{strata::cpu(0)};
  const std::vector<float> want = fit(cpu, small_clip);
  strata::OneDeviceStrategy eager{strata::gpu(0)};
  CHECK(fit(eager, small_clip) == want);
  strata::OneDeviceStrategy captured{strata::gpu(0)};
  captured.executor_options().capture_steps = true;
  CHECK(fit(captured, small_clip) == want);
  strata::MirroredStrategy two_cpu{strata::cpu_replicas(2)}, two_gpu{strata::virtual_gpus(0, 2)};
  two_cpu.executor_options().sharded_update = strata::ShardedUpdate::Off;
  two_gpu.executor_options().sharded_update = strata::ShardedUpdate::Off;
  CHECK(fit(two_gpu, small_clip) == fit(two_cpu, small_clip));
  SUBCASE("AdamW with the warm-up cosine schedule, captured and eager") {
    const nn::AdamW opt{nn::CosineDecay{.initial = 0.f, .decay_steps = 4, .alpha = 0.1f, .warmup_target = 0.03f,
                                        .warmup_steps = 2},
                        {.weight_decay = 0.1f, .global_clipnorm = small_clip}};
    strata::OneDeviceStrategy e{strata::gpu(0)}, c{strata::gpu(0)}, h{strata::cpu(0)};
    c.executor_options().capture_steps = true;
    const std::vector<float> on_cpu = fit<strata::OneDeviceStrategy, nn::AdamW>(h, 0.f, opt);
    CHECK(fit<strata::OneDeviceStrategy, nn::AdamW>(e, 0.f, opt) == on_cpu);
    CHECK(fit<strata::OneDeviceStrategy, nn::AdamW>(c, 0.f, opt) == on_cpu);
  }
}

TEST_CASE("the parameter server clips each push by its worker's whole gradient: one worker, two servers") {
  strata::OneDeviceStrategy one{strata::cpu(0)};
  const std::vector<float> want = fit(one, small_clip);
  strata::ParameterServerStrategy ps{{.workers = 1, .servers = 2, .staleness = std::uint64_t{0}}};
  close(fit(ps, small_clip), want);
}

TEST_CASE("a non-finite gradient with clipping on: the step is skipped as without it") {
  strata::OneDeviceStrategy s{strata::cpu(0)};
  auto model = s.scope(mlp);
  model.compile(nn::AdamW{0.02, {.global_clipnorm = 1.f}}, nn::SparseCategoricalCrossentropy{{.from_logits = true}},
                {}, {.seed = 3});
  auto train = s.distribute(dataset());
  model.train_step(*train.begin());  // builds and places the model
  const std::vector<float> before = strata_test::flat_weights(model);
  model.train_step(*train.begin(), [](strata::ReplicaGradient& g) { g.values[0] = NAN; });
  CHECK(strata_test::flat_weights(model) == before);
  CHECK(model.iterations() == 1);
  model.train_step(*train.begin(), [](strata::ReplicaGradient& g) { g.values[1] = INFINITY; });
  CHECK(strata_test::flat_weights(model) == before);
  CHECK(model.iterations() == 1);
}

}  // namespace optim_transformer_test
