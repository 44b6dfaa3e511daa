// A character language model: a small GPT (a functional model of
// transformer blocks: token and position embeddings, pre-norm causal
// self-attention and GELU MLPs with residual connections, a final norm and
// a projection to the characters) trained on Debian's fortunes to predict
// each next character, under whichever strategy the command line names.
// Prints the held-out validation loss in bits per character after each
// epoch, then text sampled from the trained model.
//   bash scripts/fetch-corpus.sh && ./build/examples/char_lm --strategy mirrored --replicas 2 --train-limit 2000
//   ./build/examples/char_lm --strategy pipeline --stages 2 --layers 4 --width 128 --sample 300 --temperature 0.7
//   ./build/examples/char_lm --epochs 5 --early-stopping 1 --csv h.csv --tensorboard logs --trace run.json
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/data/text.hpp>
#include <strata/nn.hpp>
#include <strata/nn/optimizers/adam_w.hpp>
#include <strata/nn/layers/attention.hpp>
#include <strata/nn/layers/embedding.hpp>
#include <strata/nn/layers/position_embedding.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>
#if STRATA_HAS_MPI  // examples/meson.build links char_lm with strata-mpi whenever the backend is built
#include <strata/strategy/by_name_mpi.hpp>  // the strategies across the ranks of an mpirun job
#endif

#include "example_cli.hpp"
#include "job_checks.hpp"
#include "run_trace.hpp"

namespace {

namespace nn = strata::nn;

#if STRATA_HAS_MPI
using Strategies = strata::MpiStrategies;
#else
using Strategies = strata::InProcessStrategies;
#endif

//! The corpus, numbered, cut into training and held-out windows.
struct Corpus {
  strata::data::CharVocab vocab;
  strata::Tensor<float> train_x, train_y, val_x, val_y;
  std::size_t chars = 0;
};

std::filesystem::path default_corpus() {
  if (const char* d = std::getenv("STRATA_CORPUS_DIR"); d && *d) return std::filesystem::path(d) / "fortunes.txt";
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "strata/corpus/fortunes.txt";
  if (const char* h = std::getenv("HOME"); h && *h) return std::filesystem::path(h) / ".cache/strata/corpus/fortunes.txt";
  return "fortunes.txt";
}

//! The text's first 90% in windows of `context` (the first `limit` of them
//! when limit > 0), its last 10% held out; Errors say what is wrong with it.
Corpus load_corpus(const example::Args& a) {
  const std::filesystem::path path = a.corpus.empty() ? default_corpus() : std::filesystem::path(a.corpus);
  const auto text = strata::data::load_text(path);
  Corpus c;
  c.vocab = strata::data::CharVocab(text);
  c.chars = text.size();
  const auto ids = c.vocab.encode(text);
  const std::size_t cut = ids.size() - ids.size() / 10;
  const std::vector<std::uint32_t> train(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut));
  const std::vector<std::uint32_t> held(ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end());
  if (held.size() < a.context + 1)
    throw strata::Error("text corpus " + path.string() + " has " + std::to_string(ids.size()) +
                        " characters: its held-out last tenth (" + std::to_string(held.size()) +
                        ") is shorter than the context of " + std::to_string(a.context) +
                        " plus one; give a longer text or a shorter --context");
  std::tie(c.train_x, c.train_y) = strata::data::char_windows(train, a.context);
  std::tie(c.val_x, c.val_y) = strata::data::char_windows(held, a.context);
  if (a.train_limit && a.train_limit < c.train_x.shape()[0]) {
    strata::Tensor<float> x{strata::Shape{a.train_limit, a.context}}, y{strata::Shape{a.train_limit, a.context}};
    std::copy_n(c.train_x.data(), x.size(), x.data());
    std::copy_n(c.train_y.data(), y.size(), y.data());
    c.train_x = std::move(x), c.train_y = std::move(y);
  }
  return c;
}

//! The GPT: embeddings, `layers` pre-norm blocks (x + attention(norm(x)),
//! then x + mlp(norm(x)) with a 4x GELU hidden layer), a final norm, logits.
nn::Model make_gpt(const example::Args& a, std::size_t vocab) {
  nn::Node x = nn::Input{{a.context}};
  nn::Node h = nn::PositionEmbedding{}(nn::Embedding{vocab, a.width}(x));
  for (int b = 0; b < a.layers; ++b) {
    h = nn::Add{}(h, nn::MultiHeadAttention{{.heads = a.heads, .causal = true}}(nn::LayerNorm{}(h)));
    const nn::Node f = nn::Dense{4 * a.width, {.activation = nn::Activation::GELU}}(nn::LayerNorm{}(h));
    h = nn::Add{}(h, nn::Dense{a.width}(f));
  }
  return nn::Model{x, nn::Dense{vocab}(nn::LayerNorm{}(h))};
}

//! Prints each epoch's training and validation loss in bits per character,
//! and adds up the time the training batches took (from an epoch's start to
//! its last batch's end: not the validation after it).
class BitsPerChar final : public nn::Callback {
 public:
  explicit BitsPerChar(bool speak) : speak_(speak) {}
  void on_epoch_begin(int) override { begin_ = last_ = std::chrono::steady_clock::now(); }
  void on_batch_end(int, const nn::Logs&) override { last_ = std::chrono::steady_clock::now(); }
  void on_epoch_end(int epoch, const nn::Logs& logs) override {
    training_ += std::chrono::duration<double>(last_ - begin_).count();
    if (!speak_) return;
    const double ln2 = std::log(2.0);
    std::printf("epoch %d: loss %.4f bits/char", epoch + 1, logs.at("loss") / ln2);
    if (logs.contains("val_loss")) std::printf(", validation %.4f bits/char", logs.at("val_loss") / ln2);
    std::printf("\n");
    std::fflush(stdout);
  }
  //! Seconds of training batches so far.
  [[nodiscard]] double training_seconds() const noexcept { return training_; }

 private:
  bool speak_;
  std::chrono::steady_clock::time_point begin_, last_;
  double training_ = 0;
};

//! `n` characters sampled from `model` after `prompt` at `temperature`,
//! drawn from strata::Rng{seed}: each from the logits at the last position
//! of the window of the text so far (its last `context` characters; causal
//! attention makes the padding after it irrelevant).
template <class M>
std::string sample(M& model, const strata::data::CharVocab& vocab, std::vector<std::uint32_t> text, std::size_t n,
                   std::size_t context, double temperature, std::uint64_t seed) {
  strata::Rng rng{strata::detail::mix(seed, 0x5a3b1e)};
  const std::size_t prompt = text.size();
  const std::size_t V = vocab.size();
  strata::Tensor<float> window{strata::Shape{1, context}};
  std::vector<double> p(V);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t len = std::min(text.size(), context);
    std::fill(window.begin(), window.end(), 0.f);
    for (std::size_t t = 0; t < len; ++t) window[t] = static_cast<float>(text[text.size() - len + t]);
    const auto logits = model.predict(window, 1);
    const float* row = logits.data() + (len - 1) * V;
    const double top = *std::max_element(row, row + V);
    double sum = 0;
    for (std::size_t v = 0; v < V; ++v) sum += p[v] = std::exp((row[v] - top) / temperature);
    double u = rng.uniform() * sum;
    std::size_t pick = V - 1;
    for (std::size_t v = 0; v < V; ++v)
      if ((u -= p[v]) < 0) {
        pick = v;
        break;
      }
    text.push_back(static_cast<std::uint32_t>(pick));
  }
  return vocab.decode(std::vector<std::uint32_t>(text.begin() + static_cast<std::ptrdiff_t>(prompt), text.end()));
}

//! `text` as a terminal shows it whole: control characters other than a
//! line break and a tab (a corpus' NUL would end a C string) written as \xNN.
std::string printable(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && ch != '\n' && ch != '\t') || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

template <class S>
int train_char_lm(S& strategy, const example::Args& a, const example::RankAgreement& agreed, const Corpus& c) {
  if constexpr (requires { strategy.executor_options(); })  // --zero, --bucket-mb, --compression
    example::apply_gradient_options(a, strategy.executor_options());
  auto model = strategy.scope([&] { return make_gpt(a, c.vocab.size()); });
  const std::size_t n = c.train_x.shape()[0];
  const auto steps = static_cast<std::int64_t>((n + a.batch - 1) / a.batch) * a.epochs;
  const auto warmup = std::min<std::int64_t>(100, std::max<std::int64_t>(1, steps / 10));
  // AdamW (weight decay 0.1, the gradient clipped to global norm 1) with a linear
  // warm-up to --learning-rate and a cosine decay to a tenth of it: GPT's recipe
  model.compile(nn::AdamW{nn::CosineDecay{.initial = 0.f,
                                          .decay_steps = std::max<std::int64_t>(1, steps - warmup),
                                          .alpha = 0.1f,
                                          .warmup_target = static_cast<float>(a.learning_rate),
                                          .warmup_steps = warmup},
                          {.weight_decay = 0.1f, .global_clipnorm = 1.f}},
                nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {},
                {.seed = a.seed, .steps_per_execution = a.steps_per_execution});
  const bool chief = strategy.any().worker_index() == 0;  // across workers, one speaks
  const std::string summary = model.summary();             // (every worker builds: a collective)
  if (!a.quiet && chief)
    std::printf("corpus: %zu characters, %zu distinct; %zu training windows of %zu, %zu held out\n%s", c.chars,
                c.vocab.size(), n, a.context, c.val_x.shape()[0], summary.c_str());
  if (const std::string how = model.gradient_reduction(); !a.quiet && chief && !how.empty())
    std::printf("%s\n", how.c_str());
  auto train = strata::data::from_tensor_slices(c.train_x, c.train_y).shuffle(n, a.seed).batch(a.batch).prefetch(2);
  auto val = strata::data::from_tensor_slices(c.val_x, c.val_y).batch(std::max<std::size_t>(a.batch, 64));
  std::optional<nn::BackupAndRestore> backup;
  nn::FitOptions fit{.epochs = a.epochs, .verbose = a.quiet ? nn::Verbosity::Silent : nn::Verbosity::Auto};
  if (!a.checkpoint_dir.empty()) {
    backup.emplace(a.checkpoint_dir, nn::BackupOptions{.save_every_steps = 100, .delete_at_end = false,
                                                       .start_over = a.start_over});
    fit.callbacks.push_back(&*backup);
  }
  // --early-stopping (on val_loss), --csv, --tensorboard: after the backup, as in the MNIST examples
  example::WatchCallbacks watch(a, true, a.batch);
  watch.add_to(fit.callbacks);
  BitsPerChar bits(chief);
  fit.callbacks.push_back(&bits);
  example::RunTrace trace(a.trace, strategy);  // --trace: the timeline of the fit and the evaluation
  model.fit(strategy.distribute(train), fit, strategy.distribute(val));
  const double secs = bits.training_seconds();
  const int epochs = watch.epochs_run(a.epochs);
  if (chief) std::fputs(watch.stopped_line(a.epochs).c_str(), stdout);  // even with --quiet: it changes the run
  // even with --quiet (it changes what the run did); without it fit said so as it resumed
  if (backup && backup->resumed_from() && chief && a.quiet)
    std::printf("resumed from the checkpoint of step %lld in %s\n", static_cast<long long>(*backup->resumed_from()),
                a.checkpoint_dir.c_str());
  const auto logs = model.evaluate(strategy.distribute(val));
  trace.finish();
  // what this process trained: a resumed run counts only the windows after its checkpoint
  const double all = static_cast<double>(n) * epochs;
  double windows = all;
  if (const auto& at = backup ? backup->resumed_at() : std::nullopt)
    windows = std::max(0.0, all - std::min(all, static_cast<double>(at->epoch) * static_cast<double>(n) +
                                                    static_cast<double>(at->batch * a.batch)));
  const double tokens = windows * static_cast<double>(a.context);
  char pace[160];
  std::snprintf(pace, sizeof pace, "%.0f tokens/s", secs > 0 ? tokens / secs : 0.0);
  std::string speed = windows > 0 ? std::string(pace) : std::string("nothing left to train");
  if (windows < all)
    speed = "resumed: " + std::to_string(static_cast<long long>(tokens)) + " tokens trained here, " + speed;
  if (chief)
    std::printf("validation %.4f bits/char (loss %.4f)  (%s, %d replica(s), %d epochs of %zu windows, trained in "
                "%.1f s: %s)\n",
                logs.at("loss") / std::log(2.0), logs.at("loss"), a.strategy.c_str(),
                strategy.num_replicas_in_sync(), epochs, n, secs, speed.c_str());
  if (a.sample > 0) {
    // the prompt: the start of a fortune (they are separated by "%" lines), else the held-out text's first character
    std::vector<std::uint32_t> prompt{static_cast<std::uint32_t>(c.val_x[0])};
    const std::string sep = "%\n";
    try {
      prompt = {static_cast<std::uint32_t>(c.vocab.id(U'%')), static_cast<std::uint32_t>(c.vocab.id(U'\n'))};
    } catch (const strata::Error&) {
    }
    const std::string text = sample(model, c.vocab, prompt, a.sample, a.context, a.temperature, a.seed);
    if (chief) std::printf("--- sampled at temperature %g, seed %llu:\n%s\n---\n", a.temperature,
                           static_cast<unsigned long long>(a.seed), printable(text).c_str());
  }
  example::save_weights_on_chief(model, a, agreed, chief);  // ZeRO 3 across workers: every one joins
  if (backup && chief) backup->finish();
  return std::isfinite(logs.at("loss")) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr bool mpi = !std::is_same_v<Strategies, strata::InProcessStrategies>;
  example::Args defaults;
  defaults.epochs = 1;
  defaults.batch = 32;
  defaults.learning_rate = 3e-3;
  const example::Args a =
      example::parse(argc, argv, defaults,
                     example::Program{Strategies::names, example::char_lm_options(mpi),
                                      "exit status: 0 success; 1 error (a missing, empty or non-UTF-8 corpus, one "
                                      "shorter than the context); 2 a mistake on the command line; 75 preempted "
                                      "(--checkpoint-dir: run the same command again to resume); 77 skipped "
                                      "(--if-present: no corpus)",
                                      "val_loss (the corpus' held-out last tenth)"});
  const bool split = a.strategy == "tensor_parallel" || (a.strategy == "pipeline" && a.has("--tensor-parallel"));
  if (split && a.heads % static_cast<std::size_t>(a.tensor_parallel) != 0) {
    std::fprintf(stderr, "%s: --heads %zu %s --tensor-parallel %d: each of the %d replicas an attention layer is "
                         "split over takes whole heads (give a --tensor-parallel that divides --heads)\n",
                 argv[0], a.heads,
                 static_cast<std::size_t>(a.tensor_parallel) > a.heads ? "is fewer than" : "is not divisible by",
                 a.tensor_parallel, a.tensor_parallel);
    return 2;
  }
  try {
    // every rank of an mpirun job given the options that change what is trained alike, the
    // pipeline's stages within the ranks and the layers: before the corpus is read
    const example::RankAgreement agreed = example::agree_across_ranks(argv[0], a);
    example::Args shape = a;  // the number of layers does not depend on the sizes: count them on a small one
    shape.width = shape.heads, shape.context = 2;
    example::check_job_shape<Strategies>(argv[0], a, make_gpt(shape, 2).layers().size());
    if (a.if_present && a.corpus.empty()) {
      std::error_code ec;
      if (!std::filesystem::exists(default_corpus(), ec)) {
        std::printf("SKIP: no corpus at %s (bash scripts/fetch-corpus.sh)\n", default_corpus().c_str());
        return 77;
      }
    }
    const Corpus corpus = load_corpus(a);
    return Strategies::with(a.strategy, example::choice_of(a),
                            [&](auto& s) { return train_char_lm(s, a, agreed, corpus); });
  } catch (const strata::nn::Preempted& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 75;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
}
