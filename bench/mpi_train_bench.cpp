// Training throughput across workers (issue 25): MultiWorkerMirroredStrategy,
// one CPU replica per rank (one thread computing: OpenBLAS runs single-threaded
// in strata), the flat gradient all-reduce or gradient buckets
// (ExecutorOptions::bucket_bytes), on MNIST-shaped synthetic data (the same on
// every rank, deterministic: every worker iterates the same global batches and
// each replica takes its rows, as MultiWorkerMirroredStrategy::distribute does).
// The model and optimizer are bench/ddp_mlp.py's, so the two print comparable rows:
// wide = 784-2048-2048-10 (5.8M parameters, a 23 MB gradient: 72% of it one
// variable, final only when backward is ~90% done), deep = 784-1024x4-10 (4.0M,
// 16 MB, in four near-equal variables: a model buckets can overlap), mlp = 784-128-10,
// ReLU, softmax cross-entropy from logits, SGD (lr 0.01) or Adam (1e-3). gpt = examples/char_lm's
// transformer (4 pre-norm blocks of width 256, 4 heads, causal, a 96-symbol vocabulary, 64 positions:
// 3.2M parameters in 38 variables, a 12.7 MB gradient), on uniform random token windows, the per-position
// cross-entropy; --batch counts windows (64 positions each).
// fit()'s finite-gradient check is off (PyTorch DDP has none).
//
// How the columns are measured: --warmup steps first (one fit: AutoReduce's
// algorithm choice measures the first 6 calls of each size class there, 9
// between two ranks over a network, so keep --warmup at 9 or more), then one
// fit of --steps steps under a trace session that records totals only
// (core/trace_session.hpp, as train_bench --breakdown). On rank 0:
//   step     = the timed fit's wall time / steps
//   compute  = the replica thread's own time in forward, backward, loss and
//              update spans, per step
//   exposed  = the replica thread's own time in collective and wait spans, per
//              step: the flat all-reduce (and the MPI exchange's waits inside
//              it), or with buckets the "gradient buckets" wait at the step's
//              end (what the buckets' reduction on the progress thread did not
//              hide); the small per-pass collectives are in it too
//   other    = step - compute - exposed (taking the batch, dispatch)
// Each rank's compute is its own; the row is rank 0's. Its comment names the
// all-reduce algorithm AutoReduce chose for each bucket (MiB/algorithm).
// Compute happens on one thread; the buckets' reductions on a progress thread.
// --zero 0|1|2|3 (ExecutorOptions::sharded_update; default 0) shards the
// optimizer state (1), the gradient too (2) and the values (3) over the ranks; the comment then
// gives the ZeRO stage, the largest peak resident memory of any rank (VmHWM:
// the process, its data and model included) and one replica's model state
// by parallel/zero/fully_sharded.hpp's formula (model_state_bytes).
// --compression none|bf16|fp16 (ExecutorOptions::compression) sends the gradient (or ZeRO 1's
// reduce-scatter) in 16 bits; the comment gives the MiB rank 0's MPI communicator carried per timed step.
//   mpirun -np 2 ./build/bench/mpi_train_bench [--model wide|deep|mlp|gpt] [--batch 64] [--steps 30] [--warmup 12]
//                                              [--bucket-mb 0|4|25] [--optimizer sgd|adam] [--label NAME] [--zero 0|1|2|3]
//                                              [--ring-chunk-mb MB]  (MpiOptions::ring_chunk_bytes; 0: its default)
//                                              [--compression none|bf16|fp16] [--tensor-parallel T]
//   bench/shaped_link.sh --rate 1gbit -- ./build-bench/bench/mpi_train_bench --bucket-mb 4   # over a shaped link
// --tensor-parallel T (default 1) gives each rank T replicas holding one copy of the model split over them
// (ExecutorOptions::tensor_parallel: attention heads, MLP pairs), the copies' sum across the ranks (by
// buckets with --bucket-mb); exposed then includes the members' sums inside forward and backward.
// --stages S (0: off) trains MultiWorkerPipelineStrategy instead: the model's layers in S stages (balanced
// by parameters), ranks / S data-parallel copies of them, --micro M micro-batches a copy (1F1B);
// --bucket-mb and --compression then apply to the copies' sum (started as the last micro-batch's backward
// ends each bucket); compute and exposed are rank 0's lane's (stage 0 of copy 0: exposed includes its
// waits for the next stage's gradients, the pipeline's bubble), and the row's label column says pipe SxD.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <strata/core/trace_session.hpp>
#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/parallel/zero/fully_sharded.hpp>
#include <strata/parallel/zero/shard_buckets.hpp>
#include <strata/strategy/multi_worker.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>

#include "bench_util.hpp"

namespace nn = strata::nn;

namespace {

nn::Sequential make(const std::string& model) {
  if (model == "mlp")
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}},
                          nn::Dense{10}};
  if (model == "wide")
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{2048, {.activation = nn::Activation::ReLU}},
                          nn::Dense{2048, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
  if (model == "deep")
    return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{}, nn::Dense{1024, {.activation = nn::Activation::ReLU}},
                          nn::Dense{1024, {.activation = nn::Activation::ReLU}},
                          nn::Dense{1024, {.activation = nn::Activation::ReLU}},
                          nn::Dense{1024, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
  throw strata::Error("unknown model " + model + " (wide, deep, mlp, gpt)");
}

// --model gpt: examples/char_lm's GPT at a fixed size (its make_gpt's shape).
constexpr std::size_t gpt_vocab = 96, gpt_context = 64, gpt_width = 256, gpt_heads = 4, gpt_layers = 4;
nn::Model make_gpt() {
  nn::Node x = nn::Input{{gpt_context}};
  nn::Node h = nn::PositionEmbedding{}(nn::Embedding{gpt_vocab, gpt_width}(x));
  for (std::size_t b = 0; b < gpt_layers; ++b) {
    h = nn::Add{}(h, nn::MultiHeadAttention{{.heads = gpt_heads, .causal = true}}(nn::LayerNorm{}(h)));
    const nn::Node f = nn::Dense{4 * gpt_width, {.activation = nn::Activation::GELU}}(nn::LayerNorm{}(h));
    h = nn::Add{}(h, nn::Dense{gpt_width}(f));
  }
  return nn::Model{x, nn::Dense{gpt_vocab}(nn::LayerNorm{}(h))};
}

// `steps` global batches of `global` rows: MNIST-shaped (standardized uniform pixels, uniform labels), or
// for the GPT windows of uniform random tokens and their next-token labels (every position labelled).
auto synthetic(const std::string& model, std::size_t steps, std::size_t global, std::uint64_t seed) {
  const std::size_t n = steps * global;
  const bool gpt = model == "gpt";
  strata::Tensor<float> x{gpt ? strata::Shape{n, gpt_context} : strata::Shape{n, 28, 28}};
  strata::Tensor<float> y{gpt ? strata::Shape{n, gpt_context} : strata::Shape{n}};
  strata::Rng rng{seed};
  if (gpt) {
    for (auto& v : x) v = static_cast<float>(rng.below(gpt_vocab));
    for (auto& v : y) v = static_cast<float>(rng.below(gpt_vocab));
  } else {
    for (auto& v : x) v = (rng.uniform() - 0.1307f) / 0.3081f;
    for (auto& v : y) v = static_cast<float>(rng.below(10));
  }
  return strata::data::from_tensor_slices(x, y).batch(global);
}

struct Args {
  std::string model = "wide", optimizer = "sgd", label;
  std::size_t batch = 64;
  int steps = 30, warmup = 12;
  double bucket_mb = 0, ring_chunk_mb = 0;
  int zero = 0;
  int stages = 0, micro = 4;  // --stages S: a pipeline of S stages, ranks / S copies; --micro M
  int tensor_parallel = 1;     // --tensor-parallel T: T replicas a rank, one copy of the model split over them
  strata::Compression compression = strata::Compression::None;
};


Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--optimizer") a.optimizer = v;
    else if (k == "--label") a.label = v;
    else if (k == "--batch") a.batch = static_cast<std::size_t>(std::max(1, std::atoi(v.c_str())));
    else if (k == "--steps") a.steps = std::max(1, std::atoi(v.c_str()));
    else if (k == "--warmup") a.warmup = std::max(1, std::atoi(v.c_str()));
    else if (k == "--bucket-mb") a.bucket_mb = std::max(0.0, std::atof(v.c_str()));
    else if (k == "--ring-chunk-mb") a.ring_chunk_mb = std::max(0.0, std::atof(v.c_str()));
    else if (k == "--zero") a.zero = std::atoi(v.c_str());
    else if (k == "--stages") a.stages = std::max(0, std::atoi(v.c_str()));
    else if (k == "--micro") a.micro = std::max(1, std::atoi(v.c_str()));
    else if (k == "--tensor-parallel") a.tensor_parallel = std::max(1, std::atoi(v.c_str()));
    else if (k == "--compression") {
      const auto c = strata::compression_named(v);
      if (!c) throw strata::Error("mpi_train_bench: --compression is none, bf16 or fp16, not " + v);
      a.compression = *c;
    } else throw strata::Error("mpi_train_bench: unknown option " + k);
  }
  if (a.zero < 0 || a.zero > 3) throw strata::Error("mpi_train_bench: --zero is 0, 1, 2 or 3");
  if (a.optimizer != "sgd" && a.optimizer != "adam")
    throw strata::Error("mpi_train_bench: --optimizer is sgd or adam, not " + a.optimizer);
  return a;
}

using C = strata::trace::Category;
double own(const strata::trace::TrackTotals& t, C c) { return 1e-9 * static_cast<double>(t.self_ns[static_cast<int>(c)]); }

//! What one rank measured of the timed fit: its seconds, one track's compute and exposed seconds, and
//! the MiB a step its communicator was handed.
struct Timing {
  double seconds = 0, compute = 0, exposed = 0, wire_mib = 0;
};

//! Compiles `model` (--optimizer), fits --warmup global batches of `global` rows, then times a fit of
//! --steps under a trace session (totals only): compute and exposed of the track `mine(name)` picks,
//! `payload()` (the communicator's bytes so far) around the timed fit. Both strategies' rows use it.
template <class S, class M, class Mine, class Payload>
Timing timed_fit(S& s, M& model, const Args& a, std::size_t global, Mine mine, Payload payload) {
  auto loss = nn::SparseCategoricalCrossentropy{{.from_logits = true}};
  if (a.optimizer == "adam") model.compile(nn::Adam{1e-3}, loss, {}, {.seed = 1});
  else model.compile(nn::SGD{0.01}, loss, {}, {.seed = 1});
  const nn::FitOptions fit{.epochs = 1, .verbose = nn::Verbosity::Silent, .check_finite = false};
  model.fit(s.distribute(synthetic(a.model, static_cast<std::size_t>(a.warmup), global, 2)), fit);
  auto timed = synthetic(a.model, static_cast<std::size_t>(a.steps), global, 3);
  strata::trace::Session trace{strata::trace::Options{}};  // totals only
  const std::uint64_t wire0 = payload();
  const double t0 = bench::now_s();
  model.fit(s.distribute(std::move(timed)), fit);
  Timing r;
  r.seconds = bench::now_s() - t0;
  r.wire_mib = static_cast<double>(payload() - wire0) / 1048576.0 / a.steps;
  trace.finish();
  for (const auto& t : trace.totals()) {
    if (!mine(t.name)) continue;
    r.compute = own(t, C::Forward) + own(t, C::Backward) + own(t, C::Loss) + own(t, C::Update);
    r.exposed = own(t, C::Collective) + own(t, C::Wait);
  }
  return r;
}

//! --stages S: the pipeline's row (see the top of the file).
int run_pipeline(const Args& a) {
  if (a.model == "gpt") throw strata::Error("mpi_train_bench: --stages takes the sequential models (wide, deep, mlp)");
  strata::MultiWorkerPipelineStrategy s;
  const int ranks = s.communicator().size();
  if (ranks % a.stages) throw strata::Error("mpi_train_bench: --stages must divide the ranks");
  const std::size_t D = static_cast<std::size_t>(ranks / a.stages);
  s.pipeline_options().micro_batches = static_cast<std::size_t>(a.micro);
  s.pipeline_options().data_parallel = D;
  s.executor_options().bucket_bytes = static_cast<std::size_t>(a.bucket_mb * 1048576.0);
  s.executor_options().compression = a.compression;
  const std::size_t global = a.batch * D;
  auto model = s.scope([&] { return make(a.model); });
  const Timing m = timed_fit(
      s, model, a, global,
      [](const std::string& name) { return name.rfind("stage 0", 0) == 0; },  // rank 0's lane: stage 0 of copy 0
      [] { return std::uint64_t{0}; });
  const double seconds = m.seconds, compute = m.compute, exposed = m.exposed;
  if (s.communicator().rank() != 0) return 0;
  const double steps = a.steps, step_ms = 1e3 * seconds / steps;
  const double compute_ms = 1e3 * compute / steps, exposed_ms = 1e3 * exposed / steps;
  const std::string label = a.label.empty() ? "pipe " + std::to_string(a.stages) + "x" + std::to_string(D) : a.label;
  std::printf("%-18s %5d %7.1f %11.0f %9.1f %10.1f %10.1f %8.1f   # %s, %s, batch %zu/copy in %d micro-batches, "
              "%d steps; %s\n",
              label.c_str(), ranks, a.bucket_mb, static_cast<double>(global) * steps / seconds, step_ms, compute_ms,
              exposed_ms, step_ms - compute_ms - exposed_ms, a.model.c_str(), a.optimizer.c_str(), a.batch, a.micro,
              a.steps, model.gradient_reduction().c_str());
  return 0;
}

//! The MultiWorkerMirroredStrategy row (see the top of the file).
template <class M>
int run_mirrored(strata::MultiWorkerMirroredStrategy& s, M& model, const Args& a) {
  const int ranks = s.num_workers();
  const std::size_t global = a.batch * static_cast<std::size_t>(ranks);
  const Timing m = timed_fit(
      s, model, a, global, [](const std::string& name) { return name == "replica 0"; },
      [&] { return s.communicator().payload_bytes(); });
  const double seconds = m.seconds, compute = m.compute, exposed = m.exposed, wire_mib = m.wire_mib;
  double peak[1] = {bench::peak_rss_mib()};  // before get_weights, which at ZeRO 3 joins a whole copy here
  s.communicator().all_reduce(std::span<double>(peak), strata::Max);
  std::vector<std::size_t> sizes;  // the gradient's layout: each variable's elements
  for (const auto& w : model.get_weights()) sizes.push_back(w.value.size());
  std::vector<strata::Range> plan{{0, model.count_params()}};
  if (const std::size_t bytes = s.executor_options().bucket_bytes) plan = strata::detail::plan_buckets(sizes, bytes);
  std::string algos;  // each bucket's (or the flat gradient's) MiB and algorithm
  if (a.zero >= 1 && s.num_workers() > 1) {  // no all-reduce of the gradient: reduce-scattered
    algos = a.zero >= 2 ? " " + model.gradient_reduction()  // (per layer, or by buckets of whole layers)
                        : " the gradient reduce-scattered after backward, the update's slices all-gathered (MPI)";
  } else {
    for (const auto& r : plan) {
      const std::size_t bytes = (r.end - r.begin) * sizeof(float);
      char b[48];
      std::snprintf(b, sizeof b, " %.1f/%s", static_cast<double>(bytes) / 1048576.0,
                    std::string(s.communicator().choose(bytes)).c_str());
      algos += b;
    }
  }
  // one replica's model state at its stage (each layer a unit: its variables, named "layer/variable"), the
  // peak over the ranks
  std::vector<std::size_t> units;
  std::string unit;
  for (const auto& w : model.get_weights()) {
    const std::string layer = w.name.substr(0, w.name.rfind('/'));
    if (units.empty() || layer != unit) units.push_back(0);
    units.back() += w.value.size();
    unit = layer;
  }
  const auto p = static_cast<std::size_t>(s.num_replicas_in_sync());
  const strata::detail::ShardLayout layout(units, std::vector<std::size_t>(p, 1));
  const int stage = p > 1 ? a.zero : 0;
  const bool compressed = a.compression != strata::Compression::None;  // error feedback's residual counted
  // ZeRO 2 and 3 by buckets (where they apply: shard_bucket_bytes): their buffers, as the executor holds them
  const strata::detail::ShardBuckets bk(layout, stage >= 2 ? strata::shard_bucket_bytes(s.executor_options()) : 0);
  const std::size_t bucket_floats = bk.state_floats(stage, p, layout.window_pair());
  const double state_mib = a.tensor_parallel > 1 ? 0.0 : static_cast<double>(strata::detail::model_state_bytes(
                               stage, model.count_params(), p, a.optimizer == "adam" ? 2 : 0, layout.window_pair(),
                               compressed, bucket_floats)) /
                           1048576.0;
  if (!s.is_chief()) return 0;
  const double steps = a.steps, step_ms = 1e3 * seconds / steps;
  const double compute_ms = 1e3 * compute / steps, exposed_ms = 1e3 * exposed / steps;
  const std::string sent_as =
      a.compression == strata::Compression::None ? "" : " (" + std::string(strata::to_string(a.compression)) + ")";
  char state[64] = "";
  if (a.tensor_parallel == 1) std::snprintf(state, sizeof state, "state %.1f MiB/replica, ", state_mib);
  else std::snprintf(state, sizeof state, "tensor parallel over %d replicas a rank, ", a.tensor_parallel);
  std::printf("%-18s %5d %7.1f %11.0f %9.1f %10.1f %10.1f %8.1f   # %s, %s, batch %zu/rank, %d steps; ZeRO %d, "
              "peak %.0f MiB, %sMPI %.2f MiB/step%s;%s\n",
              a.label.empty() ? "strata" : a.label.c_str(), ranks, a.bucket_mb,
              static_cast<double>(global) * steps / seconds, step_ms, compute_ms, exposed_ms,
              step_ms - compute_ms - exposed_ms, a.model.c_str(), a.optimizer.c_str(), a.batch, a.steps, stage, peak[0],
              state, wire_mib, sent_as.c_str(), algos.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  strata::detail::mpi::runtime();
  const Args a = parse(argc, argv);
  if (a.stages > 0) return run_pipeline(a);
  strata::MultiWorkerOptions opts;
  if (a.ring_chunk_mb > 0) opts.mpi.ring_chunk_bytes = static_cast<std::size_t>(a.ring_chunk_mb * 1048576.0);
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(a.tensor_parallel), opts};
  s.executor_options().tensor_parallel = static_cast<std::size_t>(a.tensor_parallel);
  s.executor_options().bucket_bytes = static_cast<std::size_t>(a.bucket_mb * 1048576.0);
  s.executor_options().sharded_update = *strata::sharded_update_for_stage(a.zero);
  s.executor_options().compression = a.compression;
  if (a.model == "gpt") {
    auto model = s.scope(make_gpt);
    return run_mirrored(s, model, a);
  }
  auto model = s.scope([&] { return make(a.model); });
  return run_mirrored(s, model, a);
}
