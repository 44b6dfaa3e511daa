// The model/executor seam (execution/program.hpp, execution/executor.hpp) from
// the model's side: a model that is not Sequential (a linear least-squares
// fit written against ModelProgram) trains under every placement's executor;
// the executors split batches, reduce and update as documented; the sharded
// Mirrored update keeps the weights bitwise and gives each replica 1/p of the
// optimizer state.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <vector>

#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>

#include "support/watchdog.hpp"

namespace executor_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

namespace {

// y = w . x + b over rows of [n, 3] features; loss: sum of squared errors.
class Linear final : public strata::ModelProgram {
 public:
  std::vector<std::size_t> updater_sizes;  // what executors asked for (optimizer state placement)
  std::mutex mu;

  struct Replica final : strata::ReplicaProgram {
    std::span<const float> w;
    std::span<float> g;
    void step(const strata::Batch& b, strata::Range rows, const strata::StepInfo& info,
              strata::ReplicaResult& out) override {
      out.rows = rows.size();
      out.metrics.assign(1, 0.0);
      out.loss = 0;
      if (info.phase == strata::Phase::Train) std::fill(g.begin(), g.end(), 0.f);
      for (std::size_t i = rows.begin; i < rows.end; ++i) {
        const float* x = b.x->data() + i * 3;
        const float pred = w[0] * x[0] + w[1] * x[1] + w[2] * x[2] + w[3];
        if (info.phase == strata::Phase::Predict) {
          b.predictions[i] = pred;
          continue;
        }
        const float err = pred - (*b.y)[i];
        out.loss += static_cast<double>(err) * err;
        out.metrics[0] += std::abs(err) < 0.1f;
        if (info.phase == strata::Phase::Train) {
          for (int k = 0; k < 3; ++k) g[static_cast<std::size_t>(k)] += 2.f * err * x[k] * info.scale;
          g[3] += 2.f * err * info.scale;
        }
      }
    }
  };
  struct Sgd final : strata::Updater {
    void apply(std::span<float> w, std::span<const float> g, std::size_t, std::int64_t) override {
      for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.5f * g[i];
    }
  };

  std::size_t num_params() const override { return 4; }
  std::vector<strata::Shape> variable_shapes() const override { return {strata::Shape{3}, strata::Shape{1}}; }
  std::size_t output_width() const override { return 1; }
  std::size_t num_metrics() const override { return 1; }
  std::unique_ptr<strata::ReplicaProgram> make_replica(std::span<const float> v, std::span<float> g) override {
    auto r = std::make_unique<Replica>();
    r->w = v;
    r->g = g;
    return r;
  }
  bool compiled() const override { return true; }
  std::unique_ptr<strata::Updater> make_updater(std::size_t n) const override {
    std::lock_guard lk(const_cast<std::mutex&>(mu));
    const_cast<std::vector<std::size_t>&>(updater_sizes).push_back(n);
    return std::make_unique<Sgd>();
  }
};

struct Data {
  strata::Tensor<float> x{{64, 3}}, y{{64}};
  Data() {
    for (std::size_t i = 0; i < 64; ++i) {
      for (std::size_t k = 0; k < 3; ++k) x[i * 3 + k] = static_cast<float>((i * 7 + k * 13) % 17) / 17.f - 0.5f;
      y[i] = 2.f * x[i * 3] - x[i * 3 + 1] + 0.5f * x[i * 3 + 2] + 0.25f;
    }
  }
};

// Trains `epochs` passes of batches of 20 rows (the last partial) and returns the weights.
std::vector<float> train(strata::AnyStrategy& s, Linear& m, const Data& d, int epochs,
                         std::vector<strata::PassTotals>* totals = nullptr) {
  auto ex = s.make_executor(m);
  CHECK_FALSE(ex->placed());
  ex->place(strata::Tensor<float>{{4}});
  CHECK(ex->placed());
  std::int64_t it = 0;
  strata::Tensor<float> bx, by;
  for (int e = 0; e < epochs; ++e) {
    struct P final : strata::Pass {
      const Data* d;
      strata::Tensor<float>*bx, *by;
      std::size_t at = 0, ends = 0;
      std::optional<strata::Batch> next() override {
        if (at >= 64) return std::nullopt;
        const std::size_t n = std::min<std::size_t>(20, 64 - at);
        *bx = strata::Tensor<float>{{n, 3}};
        *by = strata::Tensor<float>{{n}};
        std::copy_n(d->x.data() + at * 3, n * 3, bx->data());
        std::copy_n(d->y.data() + at, n, by->data());
        at += n;
        return strata::Batch{bx, by, nullptr};
      }
      strata::Batch empty() override { throw strata::Error("no empty shares in one process"); }
      bool end_step(std::size_t, const strata::PassTotals&) override { return ++ends, false; }
    } pass;
    pass.d = &d;
    pass.bx = &bx;
    pass.by = &by;
    pass.iteration = &it;
    const auto t = ex->run_pass(pass);
    CHECK(pass.ends == 4);
    CHECK(t.samples == 64);
    CHECK(t.local == 64);
    if (totals) totals->push_back(t);
  }
  CHECK(it == 4 * epochs);
  const auto& v = ex->value();
  return {v.data(), v.data() + v.size()};
}

}  // namespace

TEST_CASE("a model written against the seam trains under every placement's executor") {
  strata_test::Watchdog dog("executors", 120s);
  const Data d;
  Linear one;
  const auto ref = train(strata::get_strategy().any(), one, d, 60);
  CHECK(ref[0] == doctest::Approx(2.f).epsilon(0.05));
  CHECK(ref[3] == doctest::Approx(0.25f).epsilon(0.05));
  for (int p : {2, 3, 5}) {
    INFO("replicas " << p);
    for (auto mode : {strata::ShardedUpdate::Off, strata::ShardedUpdate::On}) {
      strata::MirroredStrategy s{strata::cpu_replicas(p)};
      s.executor_options().sharded_update = mode;
      Linear m;
      const auto w = train(s.any(), m, d, 60);
      for (std::size_t i = 0; i < 4; ++i) CHECK(w[i] == doctest::Approx(ref[i]).epsilon(1e-5));
      // optimizer state: the whole vector per replica, or this replica's slice of it
      REQUIRE(m.updater_sizes.size() == static_cast<std::size_t>(p));
      std::size_t total = 0;
      for (auto n : m.updater_sizes) total += n;
      CHECK(total == (mode == strata::ShardedUpdate::On ? 4u : 4u * static_cast<std::size_t>(p)));
    }
    strata::CentralStorageStrategy c{strata::cpu_replicas(p)};
    Linear m;
    const auto w = train(c.any(), m, d, 60);
    for (std::size_t i = 0; i < 4; ++i) CHECK(w[i] == doctest::Approx(ref[i]).epsilon(1e-5));
    CHECK(m.updater_sizes == std::vector<std::size_t>{4});  // one state, on the host
  }
}

TEST_CASE("the sharded mirrored update gives the unsharded update's bits") {
  const Data d;
  for (int p : {2, 4, 7}) {  // 7 replicas: more than the 4 parameters, some shards empty
    std::vector<float> w[2];
    int i = 0;
    for (auto mode : {strata::ShardedUpdate::Off, strata::ShardedUpdate::On}) {
      strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Direct> s{strata::cpu_replicas(p)};
      s.executor_options().sharded_update = mode;
      Linear m;
      w[i++] = train(s.any(), m, d, 5);
    }
    CHECK(w[0] == w[1]);
  }
}

TEST_CASE("pass totals: sums over every row, in replica order, the same for every replica count") {
  const Data d;
  std::vector<strata::PassTotals> a, b;
  Linear m1, m3;
  train(strata::get_strategy().any(), m1, d, 1, &a);
  strata::MirroredStrategy s{strata::cpu_replicas(3)};
  train(s.any(), m3, d, 1, &b);
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  CHECK(b[0].loss == doctest::Approx(a[0].loss).epsilon(1e-6));
  CHECK(b[0].metrics[0] == a[0].metrics[0]);
}

TEST_CASE("the parameter-server executor keeps the chief's copy and the servers in step") {
  strata_test::Watchdog dog("ps executor", 120s);
  const Data d;
  strata::ParameterServerStrategy s{{.workers = 2, .servers = 2, .staleness = std::uint64_t{0}}};
  Linear m;
  const auto w = train(s.any(), m, d, 60);
  CHECK(w[0] == doctest::Approx(2.f).epsilon(0.1));
  CHECK(m.updater_sizes == std::vector<std::size_t>{4});  // one state, on the servers
}

}  // namespace executor_test
