// Command line shared by the examples: which strategy, how many replicas,
// and the training knobs; strata::with_strategy then builds the named
// strategy and hands it to the same model code, whatever its type. The
// strategies, what --help says of each, which options each takes and which
// may train on a GPU are the catalogue's (strata/strategy/catalog.hpp).
//
// Strict: every number is read whole (std::from_chars) and range-checked,
// an option that does not apply to the chosen strategy is an error, and
// output paths are checked before anything trains. Every mistake is one
// sentence naming the option, the value and what is allowed, exit status 2;
// --help prints the usage (with every default) and exits 0. A value follows
// its option as the next argument or after '=' (--epochs 3, --epochs=3).
#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <strata/nn/callbacks/keras_callbacks.hpp>
#include <strata/nn/callbacks/tensorboard.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>
#include <strata/strategy/catalog.hpp>
#include <strata/gradient/compression.hpp>

#include "output_paths.hpp"

namespace example {

struct Args {
  std::string strategy = "mirrored";  // on a GPU: one_device unless named
  bool strategy_named = false;
  std::string device = "auto";  // cpu | gpu | gpu:N | auto (a GPU when the program has the CUDA backend and one is present)
  bool device_named = false;
  int replicas = 0;  // 0: one per core, at least 32 rows of the batch each (cpu_replicas_for_batch)
  int workers = 2;   // parameter_server: worker threads
  int servers = 1;   // parameter_server: servers
  std::optional<std::uint64_t> staleness;  // parameter_server: bound (none: asynchronous)
  std::string cluster;  // parameter_server under mpirun: "chief:0 ps:1 worker:2,3" (default: by --servers)
  int stages = 0;                 // pipeline: stages (0: 2; under mpirun, the ranks / --data-parallel)
  std::size_t micro_batches = 4;  // pipeline: micro-batches per batch
  int data_parallel = 1;          // pipeline: copies of it
  int tensor_parallel = 2;        // tensor_parallel: replicas per copy of the model
  strata::Schedule schedule = strata::Schedule::OneFOneB;  // pipeline
  int epochs = 5;
  std::size_t batch = 128;
  std::string data;  // MNIST directory ("": the default cache)
  std::uint64_t seed = 0;
  std::string save;  // weights file to write after training (checked before training)
  //! BackupAndRestore into this directory (checked like an output path; not wired to training yet).
  std::string checkpoint_dir;
  std::size_t train_limit = 0;  // use only the first N training examples (0: all)
  double learning_rate = 1e-3;  // the optimizer's (the program's default)
  double lr_decay = 1;          // the rate's factor per epoch (1: constant; the program's default)
  std::optional<int> zero;      // the ZeRO stage (none: the strategy's default)
  double bucket_mb = 0;         // MiB per gradient bucket (0: one all-reduce after backward)
  strata::Compression compression = strata::Compression::None;
  double validation_split = 0;  // hold out this last fraction of the training examples (0: none)
  std::size_t steps_per_execution = 1;  // steps a run of the replicas takes (CompileOptions::steps_per_execution)
  std::string tensorboard;      // TensorBoard event files into this directory ("": none)
  std::string trace;            // the run's timeline, trace-event JSON ("": none)
  std::string csv;              // CSVLogger: one row per epoch into this file ("": none)
  std::optional<int> early_stopping;  // EarlyStopping's patience (none: no early stopping)
  bool quiet = false;
  bool start_over = false;  // --checkpoint-dir: begin afresh there (BackupOptions::start_over)
  double min_accuracy = -1;  // exit status 0 only at or above this test accuracy (-1: the example's bar)
  //! The collective deadline (none: the strategy's default).
  std::optional<std::chrono::milliseconds> timeout;
  bool if_present = false;   // for the test suite: exit 77 ("skipped") when MNIST is not there
  std::vector<std::string> given;  // the options on the command line, in order
  // examples/char_lm: the corpus and the transformer's shape
  std::string corpus;         // the text ("": the cache of scripts/fetch-corpus.sh)
  std::size_t context = 128;  // characters per window
  int layers = 4;             // transformer blocks
  std::size_t width = 128;    // the model's width
  std::size_t heads = 4;      // attention heads per block
  std::size_t sample = 400;   // characters generated after training (0: none)
  double temperature = 0.8;   // the sampling temperature

  [[nodiscard]] bool has(std::string_view opt) const { return std::find(given.begin(), given.end(), opt) != given.end(); }
};

//! One option: its name, its value's placeholder ("" for a flag), one line
//! of help, and the strategies it applies to: those of the catalogue whose
//! `only_for` is true (nullptr: every strategy).
struct OptionInfo {
  std::string_view name, value, help;
  bool strata::StrategyInfo::* only_for = nullptr;
};

inline constexpr auto replica_strategies = &strata::StrategyInfo::takes_replicas;
inline constexpr auto ps_strategies = &strata::StrategyInfo::takes_ps_options;
inline constexpr auto pipeline_strategies = &strata::StrategyInfo::takes_pipeline_options;
inline constexpr auto gradient_strategies = &strata::StrategyInfo::takes_gradient_options;
inline constexpr auto bucket_strategies = &strata::StrategyInfo::takes_buckets;
inline constexpr auto tensor_strategies = &strata::StrategyInfo::takes_tensor_parallel;
inline constexpr auto compression_strategies = &strata::StrategyInfo::takes_compression;

//! The catalogue's names whose `keep` holds, in its order.
template <class Keep>
std::vector<std::string_view> catalog_names(Keep keep) {
  std::vector<std::string_view> out;
  for (const auto& s : strata::strategy_catalog)
    if (keep(s)) out.push_back(s.name);
  return out;
}
//! The strategies that may train on a GPU (--device gpu): the catalogue's gpu().
inline std::vector<std::string_view> gpu_strategies() {
  return catalog_names([](const strata::StrategyInfo& s) { return s.gpu(); });
}

inline constexpr OptionInfo option_table[] = {
    {"--strategy", "NAME", "the strategy (default: mirrored; on a GPU one_device, or mirrored with --replicas)"},
    {"--device", "cpu|gpu|gpu:N|auto",
     "where {gpu_strategies} train (auto: a GPU when there is one and no other strategy is named; the other "
     "strategies run on CPUs)"},
    {"--replicas", "N", "replicas, 1-1024, of {replica_strategies} (per worker); "
                        "default: by cores and batch. On --device gpu: N GPU replicas spread over the GPUs "
                        "(several on one GPU are virtual GPUs); on gpu:K all on GPU K",
     replica_strategies},
    {"--workers", "W", "parameter_server: worker threads in this process, 1-256 (default 2)", ps_strategies},
    {"--servers", "S", "parameter_server: servers, 1-256 (default 1)", ps_strategies},
    {"--staleness", "K", "parameter_server: steps a worker may run ahead, 0-1000000 (default: unbounded)",
     ps_strategies},
    {"--cluster", "SPEC", "parameter_server under mpirun: \"chief:0 ps:1 worker:2,3\" (default: by --servers)",
     ps_strategies},
    {"--stages", "S", "pipeline: stages, the layers split by parameters, 1-64 (default 2; under mpirun one per "
                      "rank: the ranks / D)",
     pipeline_strategies},
    {"--microbatches", "M", "pipeline: micro-batches per batch, 1-65536 (default 4)", pipeline_strategies},
    {"--schedule", "naive|gpipe|1f1b", "pipeline: the order of forwards and backwards (default 1f1b)",
     pipeline_strategies},
    {"--data-parallel", "D", "pipeline: D copies of it, each on its share of every batch, 1-64 (default 1)",
     pipeline_strategies},
    {"--tensor-parallel", "T", "tensor_parallel: replicas each copy of the model is split over, 1-64 (default 2; "
                               "--replicas R gives R / T copies, R a multiple of T; default R = T; under mpirun R per rank, the "
                               "copies data-parallel across the ranks); pipeline: replicas each stage is split over "
                               "(default 1: stages x copies x T replicas; in one process)",
     tensor_strategies},
    {"--zero", "0|1|2|3", "ZeRO stage of {gradient_strategies}' CPU replicas: 0 every replica holds everything, 1 the "
                          "optimizer state sharded, 2 the gradient too, 3 the values too (a layer's gathered before "
                          "its forward and backward); default: 1 from 3 replicas, else 0 (tensor_parallel: 0 or "
                          "1, default 0)",
     gradient_strategies},
    {"--bucket-mb", "MB", "gradient buckets of MB MiB (fractions allowed, 0-1024), each reduced as soon as backward "
                          "has finished it (default 0: one all-reduce after backward; pipeline and tensor_parallel: "
                          "their data-parallel copies' sum across the ranks of an mpirun job)",
     bucket_strategies},
    {"--compression", "none|bf16|fp16", "sum the gradient in 16 bits on the wire, with error feedback (the "
                                        "replicas', or a pipeline's data-parallel copies'; default none)",
     compression_strategies},
    {"--steps-per-execution", "N", "steps the replicas run on their own between two calls of the callbacks and the "
                                   "progress line, 1-1000000 (default 1; Keras' steps_per_execution)"},
    {"--epochs", "N", "passes over the training set, 1-100000 (default {epochs})"},
    {"--batch", "N", "global batch, 1-1048576 (default 128)"},
    {"--data", "DIR", "the MNIST directory (default: the cache of scripts/fetch-mnist.sh)"},
    {"--seed", "N", "initialization and shuffling seed, 0-18446744073709551615 (default {seed})"},
    {"--save", "FILE", "write the trained weights there (its directory must exist and be writable). Under mpirun "
                       "the chief (rank 0) writes; the other ranks' --save is unused and may differ or be left out"},
    {"--checkpoint-dir", "DIR",
     "BackupAndRestore into DIR: a checkpoint every 100 steps and at each epoch's end; running the same command "
     "again resumes from the newest. A completed run deletes its checkpoints only after its final evaluation "
     "and --save are written"},
    {"--start-over", "", "with --checkpoint-dir: begin afresh there, removing the checkpoints of the run recorded "
                         "in DIR (a DIR of another run, or with nothing this run can resume from, is otherwise "
                         "refused); files no run can read stay"},
    {"--train-limit", "N", "train on the first N examples only, 1-4294967295"},
    {"--validation-split", "F",
     "hold out the last fraction F of the training examples (after --train-limit), 0 up to (not including) 1: "
     "evaluated after each epoch as val_loss and val_accuracy (default 0: none)"},
    {"--learning-rate", "X", "the optimizer's learning rate, 0-10 (default {learning_rate})"},
    {"--lr-decay", "F", "the learning rate's factor per epoch, 0-1 (ExponentialDecay, a step each epoch; 1: constant; "
                        "default {lr_decay})"},
    {"--early-stopping", "PATIENCE",
     "stop once {monitored} has not improved for PATIENCE epochs, 0-100000 (EarlyStopping); every worker "
     "stops at the same epoch"},
    {"--csv", "FILE", "write one row per epoch to FILE (CSVLogger): epoch, then the first epoch's logs in name "
                      "order (as accuracy, loss, val_accuracy, val_loss); its directory must exist and be writable. "
                      "Under mpirun the chief (rank 0) writes; the other ranks' --csv may differ or be left out"},
    {"--tensorboard", "DIR", "write TensorBoard event files to DIR/train (and DIR/validation): each epoch's loss, "
                             "metrics, steps and samples per second, learning rate and skipped non-finite steps, "
                             "and every 100 batches the running values (tensorboard --logdir DIR); DIR/train and "
                             "DIR/validation must be directories or absent. Under mpirun the chief (rank 0) writes; "
                             "the other ranks' --tensorboard may differ or be left out"},
    {"--trace", "FILE", "write the run's timeline to FILE as trace-event JSON (open it in ui.perfetto.dev or "
                        "chrome://tracing; bench/plot_trace.py draws it): every step, batch, layer, collective, "
                        "wait and update on each replica's track. Under mpirun give it to every rank or to none "
                        "(every rank records, the chief (rank 0) merges them into its FILE; the others' FILE may "
                        "differ: their part waits beside it until the merge); parameter_server across ranks: the "
                        "chief records and writes"},
    {"--min-accuracy", "X", "exit 3 below this test accuracy, 0-1 (default {min_accuracy})"},
    {"--timeout", "SECONDS", "the collective deadline, > 0 up to 604800, fractions allowed (default 120; "
                             "parameter_server: 60; default runs one replica on this thread: nothing to wait for)"},
    {"--corpus", "FILE", "the UTF-8 text to train on (default: Debian's fortunes, fetched by scripts/fetch-corpus.sh); "
                         "its last 10% is held out for validation"},
    {"--context", "N", "characters the model sees at once, 2-4096 (default 128)"},
    {"--layers", "N", "transformer blocks, 1-64 (default 4)"},
    {"--width", "N", "the model's width, 1-8192, divisible by --heads (default 128)"},
    {"--heads", "N", "attention heads per block, 1-256 (default 4)"},
    {"--sample", "N", "characters to generate after training, 0-100000 (default 400)"},
    {"--temperature", "X", "the sampling temperature, above 0 up to 10 (default 0.8)"},
    {"--quiet", "", "no summary, no progress bar"},
    {"--if-present", "", "exit 77 (skipped) when the data (MNIST; char_lm: its corpus) or the GPU is not there (for the "
                        "test suite)"},
    {"--help", "", "print this and exit 0 (also -h)"},
};

//! What one program takes: the strategy names it accepts, its options, and
//! what --help says after them (its exit statuses).
struct Program {
  std::span<const std::string_view> strategies = strata::strategy_names;
  std::vector<std::string_view> options;
  std::string_view epilogue = "exit status: 0 success, 1 error, 2 a mistake on the command line";
  //! What --early-stopping watches, for --help ("": val_loss with --validation-split, else the training loss).
  std::string_view monitored = "";
};

//! The exit statuses of the MNIST examples, for --help.
inline constexpr std::string_view mnist_exit_statuses =
    "exit status: 0 success; 1 error; 2 a mistake on the command line; 3 test accuracy below the bar "
    "(--min-accuracy); 75 preempted (SIGTERM or SIGINT: the checkpoint is saved, run the same command again to "
    "resume); 77 skipped (--if-present: no MNIST or no GPU)";

//! The options of the MNIST examples; with `mpi`, --cluster too.
//! The options only examples/char_lm takes.
inline constexpr std::string_view char_lm_only[] = {"--corpus", "--context", "--layers", "--width",
                                                    "--heads",  "--sample",  "--temperature"};

inline std::vector<std::string_view> mnist_options(bool mpi) {
  std::vector<std::string_view> o;
  for (const auto& info : option_table)
    if ((mpi || info.name != "--cluster") &&
        std::find(std::begin(char_lm_only), std::end(char_lm_only), info.name) == std::end(char_lm_only))
      o.push_back(info.name);
  return o;
}

//! The options of examples/char_lm: the MNIST examples' (less those about
//! MNIST, the device, accuracy and the validation split: it always validates
//! on the corpus' last tenth) and its own; with `mpi`, --cluster too.
inline std::vector<std::string_view> char_lm_options(bool mpi) {
  std::vector<std::string_view> o;
  constexpr std::string_view not_here[] = {"--device", "--data", "--validation-split", "--lr-decay",
                                           "--min-accuracy"};
  for (const auto& info : option_table)
    if ((mpi || info.name != "--cluster") &&
        std::find(std::begin(not_here), std::end(not_here), info.name) == std::end(not_here))
      o.push_back(info.name);
  return o;
}

inline std::string join(std::span<const std::string_view> names, std::string_view sep) {
  std::string out;
  for (auto n : names) {
    if (!out.empty()) out += sep;  // (not sep + name: GCC 12 -O3 warns falsely, -Wrestrict)
    out += n;
  }
  return out;
}

namespace detail {

//! A number as --help shows it: "0.975", "5" (no trailing zeros).
inline std::string shown(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}
//! A number as it reads back, bit for bit, in the fewest digits that do (what the ranks of an
//! mpirun job compare, and name when they differ: 0.003, not 0.0030000000000000001).
inline std::string exact(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

//! `help` with its {epochs}, {seed}, {learning_rate} and {min_accuracy} replaced by the program's
//! defaults `d`, {gpu_strategies} and {replica_strategies} by the catalogue's names, {monitored} by
//! what --early-stopping watches (`monitored`).
inline std::string with_defaults(std::string_view help, const Args& d, std::string_view monitored) {
  std::string out(help);
  const auto put = [&](std::string_view key, const std::string& value) {
    if (const auto at = out.find(key); at != std::string::npos) out.replace(at, key.size(), value);
  };
  put("{gpu_strategies}", strata::detail::join_names(gpu_strategies(), " or "));
  put("{replica_strategies}",
      join(catalog_names([](const strata::StrategyInfo& s) { return s.takes_replicas; }), ", "));
  put("{gradient_strategies}",
      strata::detail::join_names(catalog_names([](const strata::StrategyInfo& s) { return s.takes_gradient_options; }),
                                 " and "));
  put("{epochs}", std::to_string(d.epochs));
  put("{seed}", std::to_string(d.seed));
  put("{learning_rate}", shown(d.learning_rate));
  put("{lr_decay}", shown(d.lr_decay));
  put("{monitored}", std::string(monitored));
  put("{min_accuracy}", d.min_accuracy >= 0 ? shown(d.min_accuracy) : std::string("the example's bar"));
  return out;
}

//! `text` word by word from column `col`, lines indented to `indent` and wrapped at 100 columns.
inline void wrap(std::string& out, std::string_view text, std::size_t col, std::size_t indent) {
  for (std::string_view rest = text; !rest.empty();) {
    const auto sp = rest.find(' ');
    const auto word = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
    if (col > indent && col + 1 + word.size() > 100) out += '\n' + std::string(indent, ' '), col = indent;
    if (col > indent) out += ' ', ++col;
    out += word;
    col += word.size();
  }
  out += '\n';
}

}  // namespace detail

//! The usage of `p`'s program whose defaults are `d`: every option with its
//! default, then the program's exit statuses.
inline std::string usage_text(const char* prog, const Program& p, const Args& d = {}) {
  std::string out = std::string("usage: ") + prog + " [options]  (--opt VALUE or --opt=VALUE)\n";
  for (const auto& info : option_table) {
    if (std::find(p.options.begin(), p.options.end(), info.name) == p.options.end()) continue;
    std::string left = "  " + std::string(info.name);
    if (info.name == "--strategy") left += " " + join(p.strategies, "|");
    else if (!info.value.empty()) left += " " + std::string(info.value);
    out += left;
    std::size_t col = left.size();
    if (col >= 30) out += '\n', col = 0;
    out += std::string(30 - col, ' ');
    const bool validation =
        std::find(p.options.begin(), p.options.end(), std::string_view("--validation-split")) != p.options.end();
    const std::string_view monitored = !p.monitored.empty() ? p.monitored
                                       : validation ? "val_loss (with --validation-split; else the training loss)"
                                                    : "the training loss";
    detail::wrap(out, detail::with_defaults(info.help, d, monitored), 30, 30);
    if (info.name == "--strategy")  // each name the program takes, with the catalogue's line on it
      for (const auto name : p.strategies) {
        const std::string row = "    " + std::string(name);
        out += row;
        if (row.size() >= 30) out += '\n';
        out += std::string(row.size() >= 30 ? 30 : 30 - row.size(), ' ');
        const auto* s = strata::find_strategy(name);
        detail::wrap(out, s ? s->help : std::string_view("(not in the strategy catalogue)"), 30, 30);
      }
  }
  if (!p.epilogue.empty()) detail::wrap(out, p.epilogue, 0, 2);
  return out;
}

namespace detail {

inline std::string quoted(std::string_view v) {  // (appended: GCC 12 -O3 warns falsely on "'" + string, -Wrestrict)
  std::string out = "'";
  out += v;
  out += '\'';
  return out;
}

//! A whole number in [lo, hi]: every character a digit, nothing after it.
template <class T>
T whole(const char* prog, std::string_view opt, std::string_view v, T lo, T hi) {
  const std::string range = "expected a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  const char* first = v.data();
  const char* last = v.data() + v.size();
  if (!v.empty() && v[0] == '-') {  // a negative number is out of range; anything else is not a number
    long long n = 0;
    const auto [p, ec] = std::from_chars(first, last, n);
    const bool number = p == last && (ec == std::errc{} || ec == std::errc::result_out_of_range);
    fail(prog, std::string(opt) + " " + quoted(v) + (number ? " is out of range: " : " is not a whole number: ") + range);
  }
  unsigned long long n = 0;
  const auto [p, ec] = std::from_chars(first, last, n);
  if (p != last || v.empty() || (ec != std::errc{} && ec != std::errc::result_out_of_range))
    fail(prog, std::string(opt) + " " + quoted(v) + " is not a whole number: " + range);
  if (ec == std::errc::result_out_of_range || n < static_cast<unsigned long long>(lo) ||
      n > static_cast<unsigned long long>(hi))
    fail(prog, std::string(opt) + " " + quoted(v) + " is out of range: " + range);
  return static_cast<T>(n);
}

//! A finite decimal number in [lo, hi] (or (lo, hi] with `lo_open`).
inline double decimal(const char* prog, std::string_view opt, std::string_view v, double lo, double hi,
                      bool lo_open, const std::string& range) {
  double x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || p != v.data() + v.size() || ec != std::errc{} || !std::isfinite(x))
    fail(prog, std::string(opt) + " " + quoted(v) + " is not a number: expected " + range);
  if ((lo_open ? x <= lo : x < lo) || x > hi)
    fail(prog, std::string(opt) + " " + quoted(v) + " is out of range: expected " + range);
  return x;
}

}  // namespace detail

//! Reads the command line of `p`'s program into `a` (its defaults), or ends
//! the program: --help prints the usage and exits 0, a mistake is one
//! sentence on stderr and exit status 2.
inline Args parse(int argc, char** argv, Args a, const Program& p) {
  const char* prog = argv[0];
  const Args defaults = a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    // --opt=VALUE is --opt VALUE (the value may itself hold '=')
    const auto eq = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
    const std::string k = arg.substr(0, eq);
    const std::optional<std::string> attached =
        eq == std::string::npos ? std::nullopt : std::optional<std::string>(arg.substr(eq + 1));
    if (k == "--help" || arg == "-h") {
      if (attached) fail(prog, "--help takes no value, but " + detail::quoted(arg) + " gives it one: write --help alone");
      std::fputs(usage_text(prog, p, defaults).c_str(), stdout);
      std::exit(0);
    }
    const auto info = std::find_if(std::begin(option_table), std::end(option_table),
                                   [&](const OptionInfo& o) { return o.name == k; });
    if (info == std::end(option_table)) fail(prog, "unknown option " + detail::quoted(k));
    if (std::find(p.options.begin(), p.options.end(), k) == p.options.end())
      fail(prog, k + " is not an option of this program");
    if (info->value.empty() && attached)
      fail(prog, k + " takes no value, but " + detail::quoted(arg) + " gives it one: write " + k + " alone");
    a.given.push_back(k);
    if (info->value.empty()) {
      (k == "--quiet" ? a.quiet : k == "--start-over" ? a.start_over : a.if_present) = true;
      continue;
    }
    if (!attached && i + 1 >= argc) fail(prog, "missing value after " + k + " (" + std::string(info->value) + ")");
    const std::string v = attached ? *attached : std::string(argv[++i]);
    if (k == "--strategy") {
      if (std::find(p.strategies.begin(), p.strategies.end(), v) == p.strategies.end()) {
        const auto* s = strata::find_strategy(v);
        fail(prog, "--strategy " + detail::quoted(v) + " is not a strategy of this program" +
                       (s && s->needs_mpi ? " (it needs the MPI backend, which this program is built without)"
                                          : std::string()) +
                       ": expected one of " + join(p.strategies, ", "));
      }
      a.strategy = v, a.strategy_named = true;
    } else if (k == "--device") {
      if (v.rfind("gpu:", 0) == 0) (void)detail::whole<int>(prog, "--device gpu:N", std::string_view(v).substr(4), 0, 1023);
      else if (v != "cpu" && v != "gpu" && v != "auto")
        fail(prog, "--device " + detail::quoted(v) + " is not a device: expected cpu, gpu, gpu:N or auto");
      a.device = v, a.device_named = v != "auto";
    } else if (k == "--replicas") a.replicas = detail::whole(prog, k, v, 1, 1024);
    else if (k == "--workers") a.workers = detail::whole(prog, k, v, 1, 256);
    else if (k == "--servers") a.servers = detail::whole(prog, k, v, 1, 256);
    else if (k == "--staleness") a.staleness = detail::whole<std::uint64_t>(prog, k, v, 0, 1000000);
    else if (k == "--cluster") a.cluster = v;
    else if (k == "--stages") a.stages = detail::whole(prog, k, v, 1, 64);
    else if (k == "--microbatches") a.micro_batches = detail::whole<std::size_t>(prog, k, v, 1, 65536);
    else if (k == "--data-parallel") a.data_parallel = detail::whole(prog, k, v, 1, 64);
    else if (k == "--tensor-parallel") a.tensor_parallel = detail::whole(prog, k, v, 1, 64);
    else if (k == "--schedule") {
      if (v == "naive") a.schedule = strata::Schedule::Naive;
      else if (v == "gpipe") a.schedule = strata::Schedule::GPipe;
      else if (v == "1f1b") a.schedule = strata::Schedule::OneFOneB;
      else fail(prog, "--schedule " + detail::quoted(v) + " is not a schedule: expected naive, gpipe or 1f1b");
    }
    else if (k == "--zero") a.zero = detail::whole(prog, k, v, 0, 3);
    else if (k == "--bucket-mb") a.bucket_mb = detail::decimal(prog, k, v, 0, 1024, false, "a number from 0 to 1024");
    else if (k == "--compression") {
      if (const auto c = strata::compression_named(v)) a.compression = *c;
      else fail(prog, "--compression " + detail::quoted(v) + " is not a format: expected none, bf16 or fp16");
    }
    else if (k == "--steps-per-execution") a.steps_per_execution = detail::whole<std::size_t>(prog, k, v, 1, 1000000);
    else if (k == "--epochs") a.epochs = detail::whole(prog, k, v, 1, 100000);
    else if (k == "--batch") a.batch = detail::whole<std::size_t>(prog, k, v, 1, std::size_t{1} << 20);
    else if (k == "--data") a.data = v;
    else if (k == "--seed") a.seed = detail::whole<std::uint64_t>(prog, k, v, 0, UINT64_MAX);
    else if (k == "--save") a.save = v;
    else if (k == "--checkpoint-dir") a.checkpoint_dir = v;
    else if (k == "--train-limit") a.train_limit = detail::whole<std::size_t>(prog, k, v, 1, 4294967295u);
    else if (k == "--validation-split") {
      const std::string range = "a number from 0 up to (not including) 1";
      a.validation_split = detail::decimal(prog, k, v, 0, 1, false, range);
      if (a.validation_split >= 1) fail(prog, k + " " + detail::quoted(v) + " is out of range: expected " + range);
    } else if (k == "--learning-rate") a.learning_rate = detail::decimal(prog, k, v, 0, 10, false, "a number from 0 to 10");
    else if (k == "--lr-decay") a.lr_decay = detail::decimal(prog, k, v, 0, 1, true, "a number above 0, at most 1");
    else if (k == "--early-stopping") a.early_stopping = detail::whole(prog, k, v, 0, 100000);
    else if (k == "--corpus") a.corpus = v;
    else if (k == "--context") a.context = detail::whole<std::size_t>(prog, k, v, 2, 4096);
    else if (k == "--layers") a.layers = detail::whole(prog, k, v, 1, 64);
    else if (k == "--width") a.width = detail::whole<std::size_t>(prog, k, v, 1, 8192);
    else if (k == "--heads") a.heads = detail::whole<std::size_t>(prog, k, v, 1, 256);
    else if (k == "--sample") a.sample = detail::whole<std::size_t>(prog, k, v, 0, 100000);
    else if (k == "--temperature")
      a.temperature = detail::decimal(prog, k, v, 0, 10, true, "a number above 0, at most 10");
    else if (k == "--csv") a.csv = v;
    else if (k == "--tensorboard") a.tensorboard = v;
    else if (k == "--trace") a.trace = v;
    else if (k == "--min-accuracy") a.min_accuracy = detail::decimal(prog, k, v, 0, 1, false, "a number from 0 to 1");
    else if (k == "--timeout") {
      const double s = detail::decimal(prog, k, v, 0, 604800, true, "a number of seconds above 0, at most 604800");
      a.timeout = std::chrono::milliseconds(std::max(1LL, static_cast<long long>(std::ceil(s * 1000))));
    }
  }

  // Options that the chosen strategy would ignore are mistakes, said as such.
  for (const auto& k : a.given) {
    const auto& info = *std::find_if(std::begin(option_table), std::end(option_table),
                                     [&](const OptionInfo& o) { return o.name == k; });
    if (!info.only_for) continue;
    const auto* chosen = strata::find_strategy(a.strategy);  // (every name --strategy takes is the catalogue's)
    const bool applies = chosen && chosen->*info.only_for;
    const auto names = catalog_names([&](const strata::StrategyInfo& s) { return s.*info.only_for; });
    if (!applies)
      fail(prog, k + " does not apply to --strategy " + a.strategy + (a.strategy_named ? "" : " (the default)") +
                     ": it is an option of " + join(names, ", "));
  }
  if (a.strategy == "tensor_parallel" && a.zero && *a.zero > 1)
    fail(prog, "--zero " + std::to_string(*a.zero) + " does not apply to --strategy tensor_parallel: its replicas "
                   "shard the optimizer state at most (expected --zero 0 or 1)");
  if (a.strategy == "tensor_parallel" && a.replicas && a.replicas % a.tensor_parallel != 0)
    fail(prog, "--replicas " + std::to_string(a.replicas) + " is not a multiple of --tensor-parallel " +
                   std::to_string(a.tensor_parallel) + ": each copy of the model takes " +
                   std::to_string(a.tensor_parallel) + " replicas");
  const bool gpu_named = a.device_named && a.device != "cpu";
  if (const auto* s = strata::find_strategy(a.strategy); gpu_named && a.strategy_named && !(s && s->gpu()))
    fail(prog, "--device " + a.device + " does not apply to --strategy " + a.strategy +
                   ": its replicas run on CPUs; GPUs train under " + strata::detail::join_names(gpu_strategies(), " or "));
  if (a.has("--workers") && !a.cluster.empty())
    fail(prog, "--workers does not apply with --cluster: the cluster spec's worker ranks are the workers");

  const int members = a.strategy == "pipeline" && a.has("--tensor-parallel") ? a.tensor_parallel : 1;
  if (a.stages * a.data_parallel * members > 1024)
    fail(prog, "--stages " + std::to_string(a.stages) + " x --data-parallel " + std::to_string(a.data_parallel) +
                   (members > 1 ? " x --tensor-parallel " + std::to_string(members) : std::string()) + " asks for " +
                   std::to_string(a.stages * a.data_parallel * members) + " CPU replicas; at most 1024");

  // Output paths: checked now, not after the training they would record.
  if (a.has("--save")) check_output_file(prog, "--save", a.save);
  if (a.has("--checkpoint-dir")) check_output_dir(prog, "--checkpoint-dir", a.checkpoint_dir);
  if (a.has("--csv")) check_output_file(prog, "--csv", a.csv);
  if (a.has("--tensorboard")) check_output_dir(prog, "--tensorboard", a.tensorboard);
  if (a.has("--trace")) check_output_file(prog, "--trace", a.trace);
  check_outputs_apart(prog, {{"--trace", a.has("--trace") ? &a.trace : nullptr},
                             {"--csv", a.has("--csv") ? &a.csv : nullptr},
                             {"--save", a.has("--save") ? &a.save : nullptr}},
                      {{"--checkpoint-dir", a.has("--checkpoint-dir") ? &a.checkpoint_dir : nullptr},
                       {"--tensorboard", a.has("--tensorboard") ? &a.tensorboard : nullptr}},
                      {{"--tensorboard", {"train", "validation"}}});
  if (a.width % a.heads != 0)
    fail(prog, "--width " + std::to_string(a.width) + " is not divisible by --heads " + std::to_string(a.heads) +
                   ": each head takes an equal share of the width");
  if (a.start_over && a.checkpoint_dir.empty())
    fail(prog, "--start-over applies only with --checkpoint-dir (it begins afresh in that directory)");
  return a;
}

//! The options every rank of an mpirun job must be given alike (what is
//! trained, for how long, what is written and what counts as success), as
//! (option, value) pairs of their parsed values: the ranks compare them
//! before they train (examples/job_checks.hpp). --trace must be given to
//! every rank or none (every rank records), its FILE may differ. --data,
//! --corpus, --save, --csv, --tensorboard, --device, --replicas, --quiet may
//! differ (per host, or written by the chief alone).
inline std::vector<std::pair<std::string, std::string>> options_that_must_match(const Args& a) {
  const auto or_none = [](const std::string& v) { return v.empty() ? std::string("(none)") : v; };
  return {{"--strategy", a.strategy},
          {"--epochs", std::to_string(a.epochs)},
          {"--steps-per-execution", std::to_string(a.steps_per_execution)},
          {"--batch", std::to_string(a.batch)},
          {"--seed", std::to_string(a.seed)},
          {"--train-limit", a.train_limit ? std::to_string(a.train_limit) : std::string("(none)")},
          {"--validation-split", detail::exact(a.validation_split)},
          {"--learning-rate", detail::exact(a.learning_rate)},
          {"--lr-decay", detail::exact(a.lr_decay)},
          {"--zero", a.zero ? std::to_string(*a.zero) : std::string("(default)")},
          {"--bucket-mb", detail::exact(a.bucket_mb)},
          {"--compression", std::string(strata::to_string(a.compression))},
          {"--early-stopping", a.early_stopping ? std::to_string(*a.early_stopping) : std::string("(none)")},
          {"--checkpoint-dir", or_none(a.checkpoint_dir)},
          {"--min-accuracy", detail::shown(a.min_accuracy)},
          {"--timeout", a.timeout ? std::to_string(a.timeout->count()) + " ms" : std::string("(default)")},
          {"--stages", std::to_string(a.stages)},
          {"--microbatches", std::to_string(a.micro_batches)},
          {"--schedule", std::string(strata::to_string(a.schedule))},
          {"--data-parallel", std::to_string(a.data_parallel)},
          {"--tensor-parallel", std::to_string(a.tensor_parallel)},
          {"--servers", std::to_string(a.servers)},
          {"--staleness", a.staleness ? std::to_string(*a.staleness) : std::string("(unbounded)")},
          {"--cluster", or_none(a.cluster)},
          {"--trace", a.trace.empty() ? std::string("(none)") : std::string("(a file)")},
          {"--context", std::to_string(a.context)},
          {"--layers", std::to_string(a.layers)},
          {"--width", std::to_string(a.width)},
          {"--heads", std::to_string(a.heads)},
          {"--sample", std::to_string(a.sample)},
          {"--temperature", detail::exact(a.temperature)}};
}

//! The device --device names: "auto" is the first GPU when the program can
//! train on one (strata::gpu_count()) and the strategy can run there on one
//! replica (the catalogue's one-device strategies: default, one_device; or
//! none named), else the CPU. On a GPU the default
//! strategy is one_device, or mirrored when --replicas is given (N GPU
//! replicas: spread over the GPUs for gpu and auto, all on GPU K for gpu:K).
inline strata::Device device_of(Args& a) {
  strata::Device d = strata::cpu(0);
  const auto* named = strata::find_strategy(a.strategy);
  const bool gpu_capable =
      !a.strategy_named || (named && named->gpu() && named->placement == strata::PlacementKind::OneDevice);
  if (a.device == "gpu" || (a.device == "auto" && gpu_capable && strata::gpu_count() > 0)) d = strata::gpu(0);
  else if (a.device.rfind("gpu:", 0) == 0) d = strata::gpu(std::atoi(a.device.c_str() + 4));  // checked by parse
  if (d.is_gpu() && !a.strategy_named) a.strategy = a.has("--replicas") ? "mirrored" : "one_device";
  return d;
}

//! --zero, --bucket-mb and --compression into the executor options `o`
//! of a strategy of --strategy's row (set before the model is made): what it takes.
//!   if constexpr (requires { s.executor_options(); }) example::apply_gradient_options(a, s.executor_options());
inline void apply_gradient_options(const Args& a, strata::ExecutorOptions& o) {
  const auto* info = strata::find_strategy(a.strategy);
  if (!info) return;
  if (info->takes_gradient_options && a.zero) o.sharded_update = *strata::sharded_update_for_stage(*a.zero);
  if (info->takes_buckets) o.bucket_bytes = static_cast<std::size_t>(a.bucket_mb * 1048576.0);
  if (info->takes_compression) o.compression = a.compression;
}

//! What strata::with_strategy needs from the command line.
inline strata::StrategyChoice choice_of(const Args& a, strata::Device device = strata::cpu(0)) {
  return {.replicas = a.replicas,
          .batch = a.batch,
          .workers = a.workers,
          .servers = a.servers,
          .staleness = a.staleness,
          .stages = a.stages,
          .micro_batches = a.micro_batches,
          .data_parallel = a.data_parallel,
          .schedule = a.schedule,
          .tensor_parallel = a.tensor_parallel,
          .stage_tensor_parallel = a.strategy == "pipeline" && a.has("--tensor-parallel") ? a.tensor_parallel : 1,
          .device = device,
          .gpus = device.is_gpu() && a.device.rfind("gpu:", 0) != 0 ? strata::gpu_count() : 0,
          .cluster = a.cluster,
          .timeout = a.timeout};
}

//! The callbacks the command line asks for, for one fit: --early-stopping
//! (watching val_loss when the fit validates, else the training loss),
//! --csv, --tensorboard (samples per second from `batch`, the global batch).
//! Under several workers each makes them alike; the chief alone writes.
//!   WatchCallbacks watch(a, validation, a.batch);  watch.add_to(fit.callbacks);
class WatchCallbacks {
 public:
  WatchCallbacks(const Args& a, bool validation, std::size_t batch) {
    namespace nn = strata::nn;
    if (a.early_stopping)
      stop_.emplace(nn::EarlyStoppingOptions{.monitor = validation ? "val_loss" : "loss", .patience = *a.early_stopping});
    if (!a.csv.empty()) csv_.emplace(a.csv);
    if (!a.tensorboard.empty())
      tb_.emplace(a.tensorboard, nn::TensorBoardOptions{.update_freq = 100, .batch_size = static_cast<std::int64_t>(batch)});
  }
  WatchCallbacks(const WatchCallbacks&) = delete;
  WatchCallbacks& operator=(const WatchCallbacks&) = delete;

  //! Adds them to fit's list, in one order (a resumed run finds each one's state by its kind and file).
  void add_to(std::vector<strata::nn::Callback*>& callbacks) {
    if (stop_) callbacks.push_back(&*stop_);
    if (csv_) callbacks.push_back(&*csv_);
    if (tb_) callbacks.push_back(&*tb_);
  }
  //! The epochs fit ran of `epochs`: fewer when early stopping stopped it.
  [[nodiscard]] int epochs_run(int epochs) const {
    return stop_ && stop_->stopped_epoch() >= 0 ? stop_->stopped_epoch() + 1 : epochs;
  }
  //! A line on early stopping ("" when it did not stop fit).
  [[nodiscard]] std::string stopped_line(int epochs) const {
    if (!stop_ || stop_->stopped_epoch() < 0) return {};
    char buf[256];
    std::snprintf(buf, sizeof buf, "early stopping: stopped after epoch %d of %d (%s best at epoch %d: %.6g)\n",
                  stop_->stopped_epoch() + 1, epochs, monitored().c_str(), stop_->best_epoch() + 1,
                  stop_->best().value_or(0.0));
    return buf;
  }

 private:
  [[nodiscard]] std::string monitored() const { return stop_ ? stop_->monitor() : std::string(); }
  std::optional<strata::nn::EarlyStopping> stop_;
  std::optional<strata::nn::CSVLogger> csv_;
  std::optional<strata::nn::TensorBoard> tb_;
};

}  // namespace example
