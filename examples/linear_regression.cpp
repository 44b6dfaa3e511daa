// The seed example: one Dense unit with an L2(1e-4) kernel regularizer fit
// by SGD to the single point (1, 1), repeated 100 times in batches of 10.
//   ./build/examples/linear_regression [--strategy mirrored] [--replicas 2]   (--help: every option)
//   ./build/examples/linear_regression --csv history.csv --tensorboard logs --early-stopping 2
// In Keras:
//   dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(10)
//   model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,),
//             kernel_regularizer=tf.keras.regularizers.l2(1e-4))])
//   model.compile(loss='mse', optimizer='sgd'); model.fit(dataset, epochs=2); model.evaluate(dataset)
#include <cstdio>
#include <exception>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>

#include "example_cli.hpp"
#include "run_trace.hpp"

namespace nn = strata::nn;

namespace {

int train(const example::Args& args) {
  return strata::with_strategy(args.strategy, example::choice_of(args), [&](auto& strategy) {
    auto dataset = strata::data::from_tensors(strata::Tensor<float>{{1}, {1.f}}, strata::Tensor<float>{{1}, {1.f}})
                       .repeat(100)
                       .batch(10);
    auto model = strategy.scope([] { return nn::Sequential{nn::Input{{1}}, nn::Dense{1, {.l2 = 1e-4f}}}; });
    model.compile(nn::SGD{args.learning_rate}, nn::MeanSquaredError{}, {}, {.seed = args.seed});
    if (!args.quiet) std::printf("%s", model.summary().c_str());
    const double before = model.evaluate(strategy.distribute(dataset)).at("loss");
    nn::FitOptions fit{.epochs = args.epochs, .verbose = args.quiet ? nn::Verbosity::Silent : nn::Verbosity::Auto};
    example::WatchCallbacks watch(args, false, 10);  // --early-stopping (on the loss), --csv, --tensorboard
    watch.add_to(fit.callbacks);
    example::RunTrace trace(args.trace, strategy);  // --trace: the fit's timeline
    model.fit(strategy.distribute(dataset), fit);
    trace.finish();
    if (strategy.any().worker_index() == 0) std::fputs(watch.stopped_line(args.epochs).c_str(), stdout);
    const auto logs = model.evaluate(strategy.distribute(dataset));
    const auto w = model.get_weights();
    std::printf("evaluate: loss %.6f  (kernel %.4f, bias %.4f; %d replica(s), %s)\n", logs.at("loss"),
                w[0].value[0], w[1].value[0], strategy.num_replicas_in_sync(),
                std::string(strategy.any().name()).c_str());
    // 20 SGD steps at the default rate 0.01 shrink the error k + b - 1 by 0.96 per step: the loss must fall.
    if (logs.at("loss") < 0.5 * before) return 0;
    if (strategy.any().worker_index() == 0)
      std::fprintf(stderr, "the loss went from %.6f to %.6f, not below half of where it began: exit status 1\n", before,
                   logs.at("loss"));
    return 1;
  });
}

}  // namespace

int main(int argc, char** argv) {
  example::Args defaults;
  defaults.epochs = 2;
  defaults.learning_rate = 0.01;
  const example::Args args =
      example::parse(argc, argv, defaults,
                     {.options = {"--strategy", "--replicas", "--workers", "--servers", "--staleness", "--epochs",
                                  "--seed", "--learning-rate", "--early-stopping", "--csv", "--tensorboard", "--trace", "--timeout",
                                  "--quiet", "--help"}});
  try {
    return train(args);
  } catch (const std::exception& e) {  // a failure is one sentence and exit 1, never an abort
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
}
