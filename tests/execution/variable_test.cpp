// Mirrored and central variables: identical updates keep mirrored copies
// identical; central gradients are reduced onto the single host copy.
#include <doctest/doctest.h>

#include <strata/strata.hpp>

#include "support/watchdog.hpp"

namespace variable_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

namespace {
// Plain SGD, elementwise, so that it can be applied to any slice.
auto sgd(float lr) {
  return [lr](std::span<float> w, std::span<const float> g) {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * g[i];
  };
}
// Replica r's gradient for element i.
float grad(int r, std::size_t i) { return static_cast<float>(r + 1) * 0.25f + static_cast<float>(i % 5); }
}  // namespace

TEST_CASE("mirrored variable: one copy per replica, kept identical by identical updates") {
  strata_test::Watchdog dog("mirrored variable", 60s);
  for (int p : {1, 2, 3, 8}) {
    strata::MirroredStrategy s{strata::cpu_replicas(p)};
    const std::size_t n = 1031;
    auto w = s.make_variable(strata::Tensor<float>{{n}, 1.f});
    static_assert(std::same_as<decltype(w), strata::MirroredVariable<float>>);
    CHECK(w.replicas() == p);
    for (int step = 0; step < 5; ++step)
      s.run([&](auto& ctx) {
        std::vector<float> g(n);
        for (std::size_t i = 0; i < n; ++i) g[i] = grad(ctx.replica_id_in_sync_group(), i);
        w.apply_gradient(ctx, g, sgd(0.01f), strata::Mean);
      });
    CHECK_NOTHROW(w.check_in_sync());
    for (std::size_t i : {0u, 7u, 1030u}) {
      float mean_g = 0;
      for (int r = 0; r < p; ++r) mean_g += grad(r, i);
      mean_g /= static_cast<float>(p);
      CHECK(w.value()[i] == doctest::Approx(1.f - 5 * 0.01f * mean_g).epsilon(1e-5));
    }
  }
}

TEST_CASE("mirrored variable: divergence is detected and located") {
  strata::MirroredStrategy s{strata::cpu_replicas(3)};
  auto w = s.make_variable(strata::Tensor<double>{{4}, 0.0});
  s.run([&](auto& ctx) {
    if (ctx.replica_id_in_sync_group() == 2) w.local(ctx)[3] = 1e-9;  // a bad local write
  });
  CHECK_THROWS_WITH(w.check_in_sync(), doctest::Contains("replica 2 holds 0.000000 at element 3"));
  CHECK_NOTHROW(w.check_in_sync({0.0, 1e-6}));
  CHECK_THROWS_AS(s.run([&](auto& ctx) {
    std::vector<double> g(3);
    w.apply_gradient(ctx, g, [](auto, auto) {});
  }), strata::ReplicaError);
}

TEST_CASE("central variable: one host copy, gradients reduced onto it, updated in parallel slices") {
  strata_test::Watchdog dog("central variable", 60s);
  for (int p : {1, 2, 4, 7}) {
    strata::CentralStorageStrategy s{strata::cpu_replicas(p)};
    const std::size_t n = 517;
    auto w = s.make_variable(strata::Tensor<float>{{n}, 2.f});
    static_assert(std::same_as<decltype(w), strata::CentralVariable<float>>);
    std::vector<std::atomic<int>> touched(n);
    for (int step = 0; step < 3; ++step)
      s.run([&](auto& ctx) {
        // Every replica reads the one central copy.
        CHECK(&w.local(ctx) == &w.value());
        std::vector<float> g(n);
        for (std::size_t i = 0; i < n; ++i) g[i] = grad(ctx.replica_id_in_sync_group(), i);
        w.apply_gradient(ctx, g, [&](std::span<float> v, std::span<const float> gs, std::size_t offset) {
          for (std::size_t i = 0; i < v.size(); ++i) {
            v[i] -= 0.1f * gs[i];
            touched[offset + i].fetch_add(1);
          }
        });
      });
    for (auto& t : touched) CHECK(t == 3);  // each element updated once per step, by one replica
    for (std::size_t i : {0u, 100u, 516u}) {
      float sum_g = 0;
      for (int r = 0; r < p; ++r) sum_g += grad(r, i);
      CHECK(w.value()[i] == doctest::Approx(2.f - 3 * 0.1f * sum_g).epsilon(1e-5));
    }
  }
}

TEST_CASE("mirrored and central placements train to the same weights") {
  strata::MirroredStrategy m{strata::cpu_replicas(4)};
  strata::CentralStorageStrategy c{strata::cpu_replicas(4)};
  auto wm = m.make_variable(strata::Tensor<double>{{64}, 0.5});
  auto wc = c.make_variable(strata::Tensor<double>{{64}, 0.5});
  auto update = [](std::span<double> w, std::span<const double> g) {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.05 * g[i];
  };
  auto step = [&](auto& var) {
    return [&](auto& ctx) {
      const auto& cur = var.local(ctx);
      std::vector<double> g(64);
      // Gradient of (w - r)^2 / 2 for replica r: depends on the current value.
      for (std::size_t i = 0; i < 64; ++i) g[i] = cur[i] - ctx.replica_id_in_sync_group();
      var.apply_gradient(ctx, g, update);
    };
  };
  for (int i = 0; i < 20; ++i) {
    m.run(step(wm));
    c.run(step(wc));
  }
  CHECK(allclose(wm.value(), wc.value(), {1e-12, 1e-12}));
}

}  // namespace variable_test
