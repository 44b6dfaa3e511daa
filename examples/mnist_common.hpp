// MNIST loading and the training run shared by mnist_mlp and mnist_cnn: the
// same model code under whichever strategy the command line names. Included
// by examples/mnist_common.cpp only (compiled once, linked into both).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <type_traits>

#include <strata/data/dataset.hpp>
#include <strata/data/mnist.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>
#if STRATA_HAS_MPI  // examples/meson.build links the MNIST examples with strata-mpi whenever the backend is built
#include <strata/strategy/by_name_mpi.hpp>  // the strategies across the ranks of an mpirun job
#endif
#if STRATA_HAS_NCCL  // examples/meson.build links strata-nccl whenever NCCL is built, else strata-cuda
#include <strata/nccl.hpp>  // --device gpu; GPU replicas on distinct GPUs sum with NCCL
#if STRATA_HAS_MPI
#include <strata/nccl_mpi.hpp>  // and GPU workers on distinct GPUs sum across workers with NCCL
#endif
#elif STRATA_HAS_CUDA
#include <strata/cuda.hpp>  // --device gpu
#endif

#include "example_cli.hpp"
#include "job_checks.hpp"
#include "mnist_main.hpp"
#include "run_trace.hpp"

namespace example {

//! The strategies the MNIST examples offer: with the MPI backend, those
//! across the ranks of an mpirun job too (multi_worker_mirrored, parameter
//! servers and pipeline stages on ranks).
#if STRATA_HAS_MPI
using Strategies = strata::MpiStrategies;
#else
using Strategies = strata::InProcessStrategies;
#endif

//! The training examples held out by --validation-split: the last ones.
struct Validation {
  strata::Tensor<float> images;
  strata::Tensor<std::int32_t> labels;
};

//! Moves the last `fraction` of `m`'s training examples (rounded, as Keras'
//! validation_split) into the returned set; an Error when either part would be empty.
inline Validation split_validation(strata::data::Mnist& m, double fraction) {
  const std::size_t n = m.train_images.shape()[0];
  const auto keep = static_cast<std::size_t>(std::llround(static_cast<double>(n) * (1.0 - fraction)));
  if (keep == 0 || keep >= n)
    throw strata::Error("--validation-split " + detail::shown(fraction) + " of " + std::to_string(n) +
                        " training examples leaves " + (keep == 0 ? "none to train on" : "none to validate on") +
                        ": choose a fraction that leaves both parts at least one example (or more examples, "
                        "--train-limit)");
  const std::size_t held = n - keep, px = m.train_images.size() / n;
  Validation v{strata::Tensor<float>{{held, 28, 28}}, strata::Tensor<std::int32_t>{{held}}};
  std::copy_n(m.train_images.data() + keep * px, held * px, v.images.data());
  std::copy_n(m.train_labels.data() + keep, held, v.labels.data());
  strata::Tensor<float> x{{keep, 28, 28}};
  strata::Tensor<std::int32_t> y{{keep}};
  std::copy_n(m.train_images.data(), keep * px, x.data());
  std::copy_n(m.train_labels.data(), keep, y.data());
  m.train_images = std::move(x);
  m.train_labels = std::move(y);
  return v;
}

inline strata::data::Mnist load(const Args& a) {
  const auto dir = a.data.empty() ? strata::data::default_mnist_dir() : std::filesystem::path(a.data);
  auto m = strata::data::load_mnist(dir);
  if (a.train_limit && a.train_limit < m.train_images.shape()[0]) {
    const std::size_t n = a.train_limit;
    strata::Tensor<float> x{{n, 28, 28}};
    strata::Tensor<std::int32_t> y{{n}};
    std::copy_n(m.train_images.data(), x.size(), x.data());
    std::copy_n(m.train_labels.data(), n, y.data());
    m.train_images = std::move(x);
    m.train_labels = std::move(y);
  }
  // Standardize pixels with the training set's mean and standard deviation
  // (0.1307, 0.3081), as PyTorch's MNIST examples do: zero-centred inputs
  // make the first layer's gradients better conditioned than [0, 1] pixels.
  for (auto* t : {&m.train_images, &m.test_images})
    for (float& v : *t) v = (v - 0.1307f) / 0.3081f;
  return m;
}

//! Trains `make_model()` (built in the strategy's scope) on MNIST and prints
//! the test accuracy. Returns 0 when it reaches `target` accuracy.
//! With --validation-split, `validation` holds the examples held out: fit
//! evaluates them after each epoch (val_loss, val_accuracy).
template <class S>
int train_mnist(S& strategy, const Args& a, const RankAgreement& agreed, const strata::data::Mnist& mnist,
                const std::optional<Validation>& validation, const std::function<strata::nn::Sequential()>& make_model,
                double target) {
  namespace nn = strata::nn;
  if constexpr (requires { strategy.executor_options(); })  // --zero, --bucket-mb, --compression
    apply_gradient_options(a, strategy.executor_options());
  auto model = strategy.scope(make_model);
  // --lr-decay: the rate times lr_decay after each epoch's steps (Keras' ExponentialDecay, staircase)
  const auto epoch_steps = static_cast<std::int64_t>((mnist.train_images.shape()[0] + a.batch - 1) / a.batch);
  const auto rate = a.lr_decay == 1 ? nn::LearningRate{a.learning_rate}
                                    : nn::LearningRate{nn::ExponentialDecay{static_cast<float>(a.learning_rate),
                                                                            std::max<std::int64_t>(1, epoch_steps),
                                                                            static_cast<float>(a.lr_decay), true}};
  model.compile(nn::Adam{rate}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = a.seed, .steps_per_execution = a.steps_per_execution});
  const bool chief = strategy.any().worker_index() == 0;  // across workers, one speaks
  // every worker builds here (summary builds the model, which broadcasts the chief's
  // initial weights: a collective), only the chief prints
  const std::string summary = model.summary();
  if (!a.quiet && chief) std::printf("%s", summary.c_str());
  if (const std::string how = model.gradient_reduction(); !a.quiet && chief && !how.empty())
    std::printf("gradients: %s\n", how.c_str());  // GPU replicas: which all-reduce, and why; ZeRO 2 and 3
  else if constexpr (requires { strategy.executor_options(); strategy.devices(); })
    if (const auto* info = strata::find_strategy(a.strategy);
        !a.quiet && chief && info && info->takes_gradient_options && !strategy.devices().front().is_gpu())
      std::printf("gradients: %s\n",
                  strata::describe_gradient(strategy.executor_options(), strategy.devices().size(),
                                            strategy.any().num_workers())
                      .c_str());
  const std::size_t n = mnist.train_images.shape()[0];
  auto train = strata::data::from_tensor_slices(mnist.train_images, mnist.train_labels)
                   .shuffle(n, a.seed)
                   .batch(a.batch)
                   .prefetch(2);
  auto test = strata::data::from_tensor_slices(mnist.test_images, mnist.test_labels).batch(1000);
  const auto t0 = std::chrono::steady_clock::now();
  // --checkpoint-dir: a checkpoint every 100 steps and at each epoch's end; the same
  // command run again resumes from the newest (SIGTERM/SIGINT: save, exit 75). The
  // checkpoints go only once the evaluation and --save below are written: a run
  // stopped in between resumes at its end and writes them.
  std::optional<nn::BackupAndRestore> backup;
  nn::FitOptions fit{.epochs = a.epochs, .verbose = a.quiet ? nn::Verbosity::Silent : nn::Verbosity::Auto};
  if (!a.checkpoint_dir.empty()) {
    backup.emplace(a.checkpoint_dir, nn::BackupOptions{.save_every_steps = 100, .delete_at_end = false,
                                                       .start_over = a.start_over});
    fit.callbacks.push_back(&*backup);
  }
  // --early-stopping, --csv, --tensorboard (a resumed run finds each one's state by its kind and file)
  WatchCallbacks watch(a, validation.has_value(), a.batch);
  watch.add_to(fit.callbacks);
  RunTrace trace(a.trace, strategy);  // --trace: the timeline of the fit and the evaluation
  if (validation)
    model.fit(strategy.distribute(train), fit,
              strategy.distribute(strata::data::from_tensor_slices(validation->images, validation->labels).batch(1000)));
  else
    model.fit(strategy.distribute(train), fit);
  const int epochs = watch.epochs_run(a.epochs);
  if (chief) std::fputs(watch.stopped_line(a.epochs).c_str(), stdout);  // even with --quiet: it changes the run
  // even with --quiet (it changes what the run did); without it fit said so as it resumed
  if (backup && backup->resumed_from() && chief && a.quiet)
    std::printf("resumed from the checkpoint of step %lld in %s\n", static_cast<long long>(*backup->resumed_from()),
                a.checkpoint_dir.c_str());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto logs = model.evaluate(strategy.distribute(test));
  trace.finish();
  std::string where;
  if constexpr (requires { strategy.num_servers(); }) {
    where = std::to_string(strategy.num_workers()) + " worker(s), " + std::to_string(strategy.num_servers()) +
            " server(s), staleness ";
    where += strategy.staleness() ? std::to_string(*strategy.staleness()) : std::string("unbounded");
  } else if constexpr (requires { strategy.pipeline_options(); }) {
    const auto& o = strategy.pipeline_options();
    const auto& st = strategy.pipeline_stats();
    where = std::to_string(strategy.num_replicas_in_sync() / static_cast<int>(o.data_parallel)) + " stages";
    if (o.data_parallel > 1) where += " x " + std::to_string(o.data_parallel) + " data-parallel copies";
    where += ", " + std::to_string(o.micro_batches) + " micro-batches, " + std::string(strata::to_string(o.schedule));
    if (!st.stages.empty()) {
      where += "; idle";
      for (const auto& s : st.stages) where += " " + std::to_string(static_cast<int>(100 * s.idle_fraction())) + "%";
    }
  } else {
    where = std::to_string(strategy.num_replicas_in_sync()) + " replica(s)";
    if (strategy.devices().front().is_gpu()) {
      std::map<std::string, int> on;  // "/gpu:0 (NVIDIA H100 80GB HBM3)" -> replicas there
      for (const auto& d : strategy.devices()) ++on[strata::describe(d)];
      const char* sep = " on ";
      for (const auto& [name, k] : on) where += sep + name + (k > 1 ? " x" + std::to_string(k) : ""), sep = ", ";
    }
    if (strategy.any().num_workers() > 1) {
      where += " on ";
      where += std::to_string(strategy.any().num_workers());
      where += " workers";
    }
  }
  // what this process trained: a resumed run counts only the samples after its checkpoint
  const double all = static_cast<double>(n) * epochs;
  double trained = all;
  if (const auto& at = backup ? backup->resumed_at() : std::nullopt)
    trained = std::max(0.0, all - std::min(all, static_cast<double>(at->epoch) * static_cast<double>(n) +
                                                    static_cast<double>(at->batch * a.batch)));
  std::string pace = trained > 0 ? std::to_string(static_cast<long long>(trained / secs)) + " samples/s"
                                 : std::string("nothing left to train");
  if (trained < all) pace = "resumed: " + std::to_string(static_cast<long long>(trained)) + " samples trained here, " + pace;
  if (chief)
    std::printf("test accuracy %.4f, test loss %.4f  (%s, %s, %d epochs of %zu in %.1f s: %s)\n", logs.at("accuracy"),
                logs.at("loss"), std::string(strategy.any().name()).c_str(), where.c_str(), epochs, n, secs,
                pace.c_str());
  save_weights_on_chief(model, a, agreed, chief);
  if (backup && chief) backup->finish();  // everything asked for is written: the checkpoints go
  if (logs.at("accuracy") >= target) return 0;
  if (chief)
    std::fprintf(stderr, "test accuracy %.4f is below the bar %.4f (--min-accuracy): exit status 3\n",
                 logs.at("accuracy"), target);
  return 3;
}

//! main() of an MNIST example (examples/mnist_main.hpp): parse, load, train
//! under the named strategy. The names it accepts and how it builds them:
//! example::Strategies. Defined here, not inline: this header is
//! examples/mnist_common.cpp's alone, compiled once for both examples.
int mnist_main(int argc, char** argv, const std::function<strata::nn::Sequential()>& make_model, double target,
               double lr_decay) {
  constexpr bool mpi = !std::is_same_v<Strategies, strata::InProcessStrategies>;
  Args defaults;
  defaults.min_accuracy = target;  // --help shows the bar
  defaults.lr_decay = lr_decay;
  Args a = parse(argc, argv, defaults, Program{Strategies::names, mnist_options(mpi), mnist_exit_statuses});
  if (a.min_accuracy < 0) a.min_accuracy = target;
  try {
    // The ranks of one job run one command: options that change what is trained or
    // written must match, else a rank would fail later inside a collective that names no option.
    const RankAgreement agreed = agree_across_ranks(argv[0], a);
    // --workers across ranks; a strategy that splits the model into stages: every stage needs a
    // layer, said in the options the user set, before any data is loaded
    check_job_shape<Strategies>(argv[0], a, make_model().layers().size());
    if (a.if_present) {
      const auto dir = a.data.empty() ? strata::data::default_mnist_dir() : std::filesystem::path(a.data);
      if (std::error_code ec; !std::filesystem::exists(dir / "t10k-labels-idx1-ubyte", ec)) {
        const bool gz = std::filesystem::exists(dir / "t10k-labels-idx1-ubyte.gz", ec);
        std::printf("SKIP: no MNIST in %s (%s)\n", dir.c_str(),
                    gz ? "it holds the .gz files: decompress them with gunzip -k, or run bash scripts/fetch-mnist.sh"
                       : "bash scripts/fetch-mnist.sh");
        return 77;
      }
    }
    const strata::Device device = device_of(a);
    if (a.if_present && device.is_gpu() && strata::gpu_count() == 0) {
      std::printf("SKIP: no GPU (or no CUDA backend in this build)\n");
      return 77;
    }
    if (device.is_gpu() && device.index >= strata::gpu_count())
      fail(argv[0], "--device " + a.device + ": " +
                        (strata::gpu_count() == 0 ? std::string("this program finds no usable GPU (no device, no "
                                                                "driver, or no CUDA backend in this build)")
                                                  : "there is no GPU " + std::to_string(device.index) + " (this "
                                                    "machine has " + std::to_string(strata::gpu_count()) + ")"));
    if (!a.quiet) std::printf("device: %s\n", device.is_gpu() ? strata::describe(device).c_str() : "cpu");
    auto mnist = load(a);
    std::optional<Validation> validation;
    if (a.validation_split > 0) validation.emplace(split_validation(mnist, a.validation_split));
    return Strategies::with(a.strategy, choice_of(a, device),
                            [&](auto& s) {
                              return train_mnist(s, a, agreed, mnist, validation, make_model, a.min_accuracy);
                            });
  } catch (const strata::nn::Preempted& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 75;  // EX_TEMPFAIL: run the same command again to resume
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
}

}  // namespace example
