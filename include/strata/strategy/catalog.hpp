#pragma once
//! The one list of strategies by name: what by_name.hpp's with_strategy and
//! by_name_mpi.hpp's with_mpi_strategy build, what the examples' --strategy
//! accepts and --help describes, and what the tests sweep
//! (tests/strategy/strategy_sweep.hpp). A new strategy is one row here plus its
//! constructor in by_name.hpp (or by_name_mpi.hpp); tests/strategy/catalog_test.cpp
//! fails until every row constructs.
//!   for (const auto& s : strata::strategy_catalog) std::printf("%s: %s\n", s.name.data(), s.help.data());
//!   if (const auto* s = strata::find_strategy("mirrored"); s && s->takes_replicas) ...
//! This header includes no strategy: a command line can read it cheaply.

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

#include <strata/policy/placement.hpp>

namespace strata {

//! One strategy of the catalogue: its name, what it is, and which choices
//! (StrategyChoice, the examples' options) it reads.
struct StrategyInfo {
  std::string_view name;   //!< what --strategy and with_strategy take
  PlacementKind placement;  //!< where its replicas run and its variables live (AnyStrategy::placement())
  //! Only with the MPI backend (by_name_mpi.hpp, MpiStrategies): its workers are the ranks of an mpirun job.
  bool needs_mpi = false;
  //! Its replicas step in lock-step on one global batch, split over them: each
  //! step is the step one replica would take on the whole batch, and a run
  //! repeats bitwise. False for parameter_server, whose workers push
  //! gradients as they go (staleness 0 gives rounds, not a split batch).
  bool synchronous = true;
  //! Each step gives the bits one replica's step on the whole batch gives.
  //! False for tensor_parallel: its split products add their partial sums
  //! in another order (equal within float rounding; a run still repeats bitwise;
  //! so does pipeline's with --tensor-parallel, exact by default).
  bool exact = true;
  //! Every replica runs the whole model. False for pipeline, which splits
  //! the layers into stages (a model needs at least one layer per stage).
  bool whole_model = true;
  bool takes_replicas = false;          //!< reads StrategyChoice::replicas (--replicas)
  bool takes_ps_options = false;        //!< reads workers, servers, staleness, cluster (--workers ...)
  bool takes_pipeline_options = false;  //!< reads stages, micro_batches, data_parallel, schedule (--stages ...)
  //! Its executor options shard the gradient (--zero: ExecutorOptions::sharded_update).
  bool takes_gradient_options = false;
  //! Its executor options sum the gradient by buckets as backward ends them (--bucket-mb:
  //! ExecutorOptions::bucket_bytes; pipeline: its copies' sum across ranks).
  bool takes_buckets = false;
  //! Reads --tensor-parallel T: StrategyChoice::tensor_parallel (tensor_parallel), stage_tensor_parallel (pipeline).
  bool takes_tensor_parallel = false;
  //! Its executor options compress the gradient's sum (--compression: ExecutorOptions::compression).
  bool takes_compression = false;
  std::string_view help = {};           //!< one line for --help

  //! Its replicas may be GPUs (StrategyChoice::device, --device gpu): a
  //! property of its placement (placement_on_gpus).
  [[nodiscard]] constexpr bool gpu() const noexcept { return placement_on_gpus(placement); }
};

//! Every strategy, in the order --help lists them.
inline constexpr std::array strategy_catalog{
    StrategyInfo{.name = "default",
                 .placement = PlacementKind::OneDevice,
                 .help = "one replica on the calling thread: the strategy in force when none is chosen"},
    StrategyInfo{.name = "one_device",
                 .placement = PlacementKind::OneDevice,
                 .help = "one replica on one device (a CPU or a GPU), on a thread of its own"},
    StrategyInfo{.name = "mirrored",
                 .placement = PlacementKind::Mirrored,
                 .takes_replicas = true,
                 .takes_gradient_options = true,
                 .takes_buckets = true,
                 .takes_compression = true,
                 .help = "replicas in this process, each with a copy of every variable; gradients all-reduced"},
    StrategyInfo{.name = "tensor_parallel",
                 .placement = PlacementKind::Mirrored,
                 .exact = false,
                 .takes_replicas = true,
                 .takes_gradient_options = true,  // --zero 0|1
                 .takes_buckets = true,           // the copies' sum across workers (mpirun)
                 .takes_tensor_parallel = true,
                 .takes_compression = true,
                 .help = "each copy of the model split over T replicas of a process (attention heads, MLP "
                         "pairs: Megatron's tensor parallelism), the copies data-parallel (under mpirun: across "
                         "the ranks too)"},
    StrategyInfo{.name = "central_storage",
                 .placement = PlacementKind::CentralStorage,
                 .takes_replicas = true,
                 .help = "replicas in this process computing, one copy of each variable on the host"},
    StrategyInfo{.name = "parameter_server",
                 .placement = PlacementKind::ParameterServer,
                 .synchronous = false,
                 .takes_ps_options = true,
                 .help = "asynchronous workers pushing gradients to variables sharded over servers (under "
                         "mpirun: the ranks)"},
    StrategyInfo{.name = "pipeline",
                 .placement = PlacementKind::Pipeline,
                 .whole_model = false,
                 .takes_pipeline_options = true,
                 .takes_buckets = true,  // the data-parallel copies' sum across ranks
                 .takes_tensor_parallel = true,
                 .takes_compression = true,  // the data-parallel copies' sum
                 .help = "the model's layers split into stages, micro-batches flowing through them (under "
                         "mpirun: a stage per rank); with T, each stage split over T replicas by tensor "
                         "parallelism"},
    StrategyInfo{.name = "multi_worker_mirrored",
                 .placement = PlacementKind::Mirrored,
                 .needs_mpi = true,
                 .takes_replicas = true,
                 .takes_gradient_options = true,
                 .takes_buckets = true,
                 .takes_compression = true,
                 .help = "mirrored across the processes of an mpirun job, each a worker with its own replicas"},
};

//! The catalogue's row named `name`, or nullptr.
[[nodiscard]] constexpr const StrategyInfo* find_strategy(std::string_view name) noexcept {
  for (const auto& s : strategy_catalog)
    if (s.name == name) return &s;
  return nullptr;
}

namespace detail {
//! A catalogue filter (a plain function: it is a template argument).
using StrategyFilter = bool (*)(const StrategyInfo&);
constexpr bool any_strategy(const StrategyInfo&) { return true; }
constexpr bool in_process_strategy(const StrategyInfo& s) { return !s.needs_mpi; }

//! The names of the catalogue's rows that `Keep` keeps, in catalogue order.
template <StrategyFilter Keep>
constexpr auto strategy_names_where() {
  constexpr auto n = static_cast<std::size_t>(std::count_if(strategy_catalog.begin(), strategy_catalog.end(), Keep));
  std::array<std::string_view, n> out{};
  std::size_t i = 0;
  for (const auto& s : strategy_catalog)
    if (Keep(s)) out[i++] = s.name;
  return out;
}

//! The parts one after another (appended: GCC 12 at -O3 warns falsely,
//! -Wrestrict, on some chains of "literal" + std::string).
inline std::string words(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += p;
  return out;
}

//! "a, b or c" (`last` between the last two).
inline std::string join_names(const auto& names, std::string_view last = ", ") {
  std::string out;
  std::size_t i = 0;
  for (std::string_view n : names) {
    if (i > 0) out += i + 1 == std::size(names) ? last : std::string_view(", ");
    out += n;
    ++i;
  }
  return out;
}
}  // namespace detail

}  // namespace strata
