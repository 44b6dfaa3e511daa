#pragma once
//! Choosing an in-process strategy at run time, by name (a command line's
//! --strategy): the same generic code then runs under the strategy's type.
//!   return strata::with_strategy("mirrored", 4, [&](auto& strategy) { return train(strategy); });
//! The names and what each is are the catalogue's (strategy/catalog.hpp):
//! InProcessStrategies::names is its rows without needs_mpi.
//! This header never includes <mpi.h>, so every target may use it. The
//! strategies that need MPI (multi_worker_mirrored, and parameter_server
//! across the ranks of an mpirun job) come with the opt-in header
//! strata/strategy/by_name_mpi.hpp: with_mpi_strategy accepts every name
//! here plus those, for targets that link the strata-mpi dependency.
//! The choice between the two is the program's, made where it includes them
//! (e.g. `#if STRATA_HAS_MPI` in a file whose target links strata-mpi
//! whenever the backend is built), never by a macro of a dependency.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <cstddef>
#include <type_traits>
#include <utility>

#include <strata/core/error.hpp>
#include <strata/strategy/catalog.hpp>
#include <strata/strategy/parameter_server.hpp>
#include <strata/parallel/pipeline/pipeline_options.hpp>
#include <strata/strategy/strategy.hpp>

namespace strata {

//! What with_strategy needs besides the name.
struct StrategyChoice {
  int replicas = 0;  //!< mirrored / central_storage / multi_worker_mirrored: replicas (0: by cores and batch)
  //! The global batch the replicas train on: with `replicas` 0, mirrored and
  //! central_storage take cpu_replicas_for_batch(batch) (0: one per core).
  std::size_t batch = 0;
  int workers = 2;   //!< parameter_server: worker threads
  int servers = 1;   //!< parameter_server: server shards' hosts
  std::optional<std::uint64_t> staleness = std::nullopt;  //!< parameter_server: bound (none: asynchronous)
  int stages = 0;  //!< pipeline: stages, split by parameters (0: 2 in one process, the ranks / data_parallel under mpirun)
  std::size_t micro_batches = 4;           //!< pipeline: micro-batches per batch
  int data_parallel = 1;                   //!< pipeline: copies of it (stages x copies replicas, on `device`'s kind)
  Schedule schedule = Schedule::OneFOneB;  //!< pipeline: the order of forwards and backwards
  //! tensor_parallel: replicas per copy of the model (`replicas`, when 0: this many, one copy).
  int tensor_parallel = 2;
  //! pipeline: replicas each stage is split over by tensor parallelism
  //! (stages x data_parallel x this replicas; 1: whole stages).
  int stage_tensor_parallel = 1;
  //! default / one_device: the device of the one replica; mirrored, central_storage, pipeline: with a GPU
  //! here, `replicas` GPU replicas (1 when 0) on it, or spread over the first `gpus` GPUs (replica r
  //! on GPU r % gpus).
  //! parameter_server runs on CPUs so far.
  Device device = cpu(0);
  int gpus = 0;  //!< GPU replicas (or stages): spread over GPUs 0 to gpus - 1 (0: all on `device`)
  std::string cluster = {};  //!< parameter_server under mpirun (by_name_mpi.hpp): a ClusterSpec ("": chief 0, `servers` servers, workers)
  //! The collective deadline (none: each strategy's default): CommOptions::timeout
  //! of one_device, mirrored and central_storage (and of a multi-worker strategy's
  //! local replicas), MpiOptions::timeout across workers, ParameterServerOptions::timeout.
  //! "default" runs its one replica on the calling thread: it never waits for
  //! another, so there is nothing to bound.
  std::optional<std::chrono::milliseconds> timeout = std::nullopt;

  //! The communicator options this choice asks for.
  [[nodiscard]] CommOptions comm_options() const {
    CommOptions o;
    if (timeout) o.timeout = *timeout;
    return o;
  }
  //! The parameter-server options this choice asks for.
  [[nodiscard]] ParameterServerOptions ps_options() const {
    ParameterServerOptions o{.workers = workers, .servers = servers, .staleness = staleness};
    if (timeout) o.timeout = *timeout;
    return o;
  }
};

//! Mirrored's GPU replicas for choice `c` (its device is a GPU): `replicas`
//! of them (1 when 0), on c.device, or spread over GPUs 0 .. gpus - 1.
//!   strata::gpu_replicas({.replicas = 4, .device = strata::gpu(0), .gpus = 2});   // /gpu:0 /gpu:1 /gpu:0 /gpu:1
//! `first` shifts the spread: a worker with local rank k and n replicas
//! starts at GPU k * n, so that the workers of one node take distinct GPUs
//! where there are enough (NCCL can then join them).
inline std::vector<Device> gpu_replicas(const StrategyChoice& c, int first = 0) {
  const int n = c.replicas > 0 ? c.replicas : 1;
  std::vector<Device> d;
  for (int r = 0; r < n; ++r) d.push_back(gpu(c.gpus > 0 ? (first + r) % c.gpus : c.device.index));
  return d;
}

//! The strategies of one process, by name: what with_strategy builds.
//!   for (auto n : strata::InProcessStrategies::names) std::puts(n.data());
//!   strata::InProcessStrategies::with("mirrored", {.replicas = 2}, fn);
struct InProcessStrategies {
  //! The catalogue's names that need no MPI, in its order.
  static constexpr auto names = detail::strategy_names_where<detail::in_process_strategy>();

  //! The size of the job this process runs in: 1 (every strategy here runs in this process).
  [[nodiscard]] static constexpr int launched_ranks() noexcept { return 1; }
  //! The stages with("pipeline", c, fn) splits a model into: c.stages, 2 when 0.
  //! A program checks them against its model's layers before it trains (each stage needs one):
  //!   if (S::pipeline_stages(c) > model.layers().size()) ...;   // say so in the user's terms
  [[nodiscard]] static constexpr int pipeline_stages(const StrategyChoice& c) noexcept {
    return c.stages ? c.stages : 2;
  }

  //! Calls fn(strategy) with the strategy named `name` ("default": get_strategy();
  //! "one_device": cpu(0); "mirrored" / "central_storage": `replicas` CPU replicas,
  //! 0 for one per core (at least 32 rows each when `batch` is given); "tensor_parallel": a
  //! MirroredStrategy of `replicas` replicas (`tensor_parallel` when 0) whose copies of the
  //! model are split over `tensor_parallel` of them; "parameter_server": `workers` worker threads and
  //! `servers` servers in this process, `staleness` its bound; "pipeline": a
  //! PipelineStrategy of `data_parallel` copies of `stages` stages, one CPU
  //! replica each (`stage_tensor_parallel` each: the stage split over
  //! them), running `micro_batches` per batch by `schedule`) and returns what fn returns (the same type for every
  //! strategy). A name not in `known` throws strata::Error: listing `known`,
  //! or, for a catalogue name that needs MPI, naming by_name_mpi.hpp.
  template <class F>
  static auto with(std::string_view name, StrategyChoice c, F&& fn,
                   std::span<const std::string_view> known = names) -> std::invoke_result_t<F&, DefaultStrategy&> {
    check_known(name, known);
    const auto devices = [&] {
      return c.replicas == 0 && c.batch ? cpu_replicas_for_batch(c.batch) : cpu_replicas(c.replicas);
    };
    if (name == "default") {
      if (!c.device.is_gpu()) return fn(get_strategy());
      DefaultStrategy s{c.device};
      return fn(s);
    }
    if (name == "one_device") {
      OneDeviceStrategy s{c.device, c.comm_options()};
      return fn(s);
    }
    if (name == "mirrored") {
      MirroredStrategy s{c.device.is_gpu() ? gpu_replicas(c) : devices(), c.comm_options()};
      return fn(s);
    }
    if (name == "tensor_parallel") {
      StrategyChoice lanes = c;
      if (lanes.replicas == 0) lanes.replicas = c.tensor_parallel;
      MirroredStrategy s{c.device.is_gpu() ? gpu_replicas(lanes) : cpu_replicas(lanes.replicas), c.comm_options()};
      s.executor_options().tensor_parallel = static_cast<std::size_t>(c.tensor_parallel);
      return fn(s);
    }
    if (name == "central_storage") {
      CentralStorageStrategy s{c.device.is_gpu() ? gpu_replicas(c) : devices(), c.comm_options()};
      return fn(s);
    }
    // a GPU named for a strategy of CPU replicas: it says so with a sentence
    if (name == "parameter_server") {
      if (c.device.is_gpu())
        throw Error("strata: parameter_server runs its workers on CPUs so far, not on " + c.device.str());
      if constexpr (std::is_invocable_v<F&, ParameterServerStrategy&>) {
        ParameterServerStrategy s{c.ps_options()};
        return fn(s);
      } else {
        throw Error("this program's code needs synchronous replicas (Strategy::run); it cannot run under "
                    "parameter_server");
      }
    }
    if (name == "pipeline") {
      if constexpr (std::is_invocable_v<F&, PipelineStrategy&>) {
        // a stage per replica: on GPUs, spread over them as mirrored's replicas are
        StrategyChoice lanes = c;
        lanes.replicas = (c.stages ? c.stages : 2) * c.data_parallel * c.stage_tensor_parallel;
        PipelineStrategy s{c.device.is_gpu() ? gpu_replicas(lanes) : cpu_replicas(lanes.replicas), c.comm_options()};
        s.pipeline_options().micro_batches = c.micro_batches;
        s.pipeline_options().data_parallel = static_cast<std::size_t>(c.data_parallel);
        s.pipeline_options().tensor_parallel = static_cast<std::size_t>(c.stage_tensor_parallel);
        s.pipeline_options().schedule = c.schedule;
        return fn(s);
      } else {
        throw Error("this program's code needs replicas that each run the whole model; it cannot run under "
                    "pipeline");
      }
    }
    // a catalogue row this function cannot build (tests/strategy/catalog_test.cpp constructs every row)
    throw Error(detail::words({"strata: strategy '", name, "' is in the catalogue (strategy/catalog.hpp) but "
                               "InProcessStrategies::with cannot build it: add its constructor to by_name.hpp"}));
  }

  //! Throws strata::Error unless `name` is one of `known`: a catalogue name
  //! that needs MPI says so; any other lists `known`.
  static void check_known(std::string_view name, std::span<const std::string_view> known) {
    if (std::find(known.begin(), known.end(), name) != known.end()) return;
    if (const StrategyInfo* s = find_strategy(name); s && s->needs_mpi)
      throw Error(detail::words({"strategy '", name, "' needs the MPI backend: use with_mpi_strategy "
                                 "(strata/strategy/by_name_mpi.hpp, a target linking strata-mpi) and run under mpirun"}));
    throw Error(detail::words({"unknown strategy '", name, "' (known: ", detail::join_names(known), ")"}));
  }
};

//! The names with_strategy accepts.
inline constexpr const auto& strategy_names = InProcessStrategies::names;

//! Calls fn(strategy) with the in-process strategy named `name` (see
//! InProcessStrategies::with) and returns what fn returns.
template <class F>
auto with_strategy(std::string_view name, StrategyChoice c, F&& fn) {
  return InProcessStrategies::with(name, std::move(c), std::forward<F>(fn));
}
template <class F>
auto with_strategy(std::string_view name, int replicas, F&& fn) {
  return with_strategy(name, StrategyChoice{.replicas = replicas}, std::forward<F>(fn));
}

}  // namespace strata
