// The README's tour, compiled: a strategy, replicas, collectives, and a
// mirrored variable trained by plain SGD to fit y = 3x + 2.
//   ./build/examples/tour [--strategy default|one_device|mirrored|central_storage] [--replicas N] [--timeout S]
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>

#include "example_cli.hpp"

// replicas in lock-step that each hold the variables: not a parameter server's
// workers, nor a pipeline's stages
template <class Strategy>
  requires(!std::same_as<Strategy, strata::ParameterServerStrategy> && !std::same_as<Strategy, strata::PipelineStrategy>)
int train(Strategy& strategy) {
  const int p = strategy.num_replicas_in_sync();
  // Parameters [w, b], placed as the strategy says (one copy per replica, or one central copy).
  auto params = strategy.make_variable(strata::Tensor<double>{{2}, {0.0, 0.0}});
  const int global_batch = 64;
  for (int step = 0; step < 300; ++step) {
    auto losses = strategy.run([&](auto& ctx) {
      const int r = ctx.replica_id_in_sync_group();
      const auto& wb = params.local(ctx);
      // This replica's share of the global batch: x = 0, 1/64, ..., drawn by replica.
      std::vector<double> grad{0.0, 0.0};
      double loss = 0;
      for (int i = r; i < global_batch; i += p) {
        const double x = i / double(global_batch), y = 3 * x + 2;
        const double err = wb[0] * x + wb[1] - y;
        loss += err * err / global_batch;  // scaled by the global batch: sum over replicas = mean loss
        grad[0] += 2 * err * x / global_batch;
        grad[1] += 2 * err / global_batch;
      }
      params.apply_gradient(ctx, grad, [](std::span<double> v, std::span<const double> g) {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] -= 0.5 * g[i];
      });
      return loss;
    });
    if (step % 100 == 0 || step == 299)
      std::printf("step %3d  loss %.6f\n", step, strategy.reduce(strata::Sum, losses));
  }
  std::printf("fit: y = %.4f x + %.4f on %d replica(s)\n", params.value()[0], params.value()[1], p);
  return std::abs(params.value()[0] - 3) < 1e-2 && std::abs(params.value()[1] - 2) < 1e-2 ? 0 : 1;
}

//! A strategy this tour runs: in this process, replicas in lock-step, each running the whole step.
constexpr bool lock_step(const strata::StrategyInfo& i) { return !i.needs_mpi && i.synchronous && i.whole_model; }

int main(int argc, char** argv) {
  // the catalogue's in-process strategies whose replicas each run the whole step in lock-step
  // (parameter_server's workers do not, see train; pipeline's stages split a model)
  static constexpr auto names = strata::detail::strategy_names_where<lock_step>();
  const example::Args args =
      example::parse(argc, argv, {}, {.strategies = names, .options = {"--strategy", "--replicas", "--timeout", "--help"}});
  try {
    return strata::with_strategy(args.strategy, example::choice_of(args), [](auto& s) -> decltype(train(s)) {
      if constexpr (!std::same_as<std::remove_cvref_t<decltype(s)>, strata::DefaultStrategy>)
        std::printf("collective timeout %lld ms\n", static_cast<long long>(s.options().timeout.count()));
      return train(s);
    });
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "tour: %s\n", e.what());
    return 1;
  }
}
