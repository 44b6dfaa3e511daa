#pragma once
//! Choosing a strategy by name, the MPI strategies included: everything
//! by_name.hpp offers, plus "multi_worker_mirrored" (this process is one
//! worker of the mpirun job), "parameter_server" across the job's ranks
//! (chief, servers and workers as a ClusterSpec assigns them) and
//! "pipeline" across them (one stage per rank: MultiWorkerPipelineStrategy). Opt-in: it
//! needs the MPI backend (its target links the strata-mpi dependency) and
//! stops the build with the Meson option to enable otherwise.
//!   #include <strata/strategy/by_name_mpi.hpp>
//!   return strata::with_mpi_strategy(argv_strategy, {.replicas = 2}, [&](auto& s) { return train(s); });

#include <strata/comm/mpi/mpi.hpp>  // first: the #error naming -Dmpi=enabled when the backend is off

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <utility>

#include <strata/ps/mpi.hpp>
#include <strata/strategy/by_name.hpp>
#include <strata/strategy/multi_worker.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>

namespace strata {

namespace detail {
//! The size of the MPI job this process was started in (1 when not under mpirun).
inline int launched_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}
}  // namespace detail

//! The strategies by name, those across MPI ranks included: what
//! with_mpi_strategy builds.
//!   for (auto n : strata::MpiStrategies::names) std::puts(n.data());
//!   strata::MpiStrategies::with("multi_worker_mirrored", {.replicas = 1}, fn);
struct MpiStrategies {
  //! Every name of the catalogue (strategy/catalog.hpp), in its order.
  static constexpr auto names = detail::strategy_names_where<detail::any_strategy>();

  //! InProcessStrategies::with, and: "multi_worker_mirrored": this process is
  //! one worker of the MPI job with `replicas` local replicas, 0 for its share
  //! of the node's cores; "parameter_server" under mpirun (or with a
  //! `cluster`): the job's ranks are the chief, servers and workers.
  //! Whether `name` with `c` would be the parameter server across the ranks
  //! of the MPI job (its workers then are ranks, and `c.workers` is unused).
  [[nodiscard]] static bool parameter_server_across_ranks(std::string_view name, const StrategyChoice& c) {
    return name == "parameter_server" && (detail::launched_ranks() > 1 || !c.cluster.empty());
  }
  //! The size of the MPI job this process was started in, from the launcher's
  //! environment (no MPI call): 1 when not under mpirun.
  [[nodiscard]] static int launched_ranks() { return detail::launched_ranks(); }
  //! The stages with("pipeline", c, fn) splits a model into: under mpirun one
  //! per rank (per member of a stage), the ranks / (c.data_parallel x
  //! c.stage_tensor_parallel) (c.stages, when given, must make
  //! exactly the ranks); else InProcessStrategies::pipeline_stages(c).
  [[nodiscard]] static int pipeline_stages(const StrategyChoice& c) {
    const int ranks = launched_ranks();
    return ranks > 1 ? ranks / std::max(1, c.data_parallel * c.stage_tensor_parallel)
                     : InProcessStrategies::pipeline_stages(c);
  }

  template <class F>
  static auto with(std::string_view name, StrategyChoice c, F&& fn) -> std::invoke_result_t<F&, DefaultStrategy&> {
    if (parameter_server_across_ranks(name, c)) {
      if constexpr (std::is_invocable_v<F&, ParameterServerStrategy&>) {
        const ParameterServerOptions o = c.ps_options();
        (void)detail::mpi::runtime();
        int world = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        MpiParameterServers rt{c.cluster.empty() ? ClusterSpec::from_counts(c.servers, world)
                                                 : ClusterSpec::parse(c.cluster, world),
                               o};
        ParameterServerStrategy s{rt};
        return fn(s);
      }
    }
    if (name == "pipeline" && detail::launched_ranks() > 1) {
      if constexpr (std::is_invocable_v<F&, MultiWorkerPipelineStrategy&>) {
        MpiOptions mpi;
        if (c.timeout) mpi.timeout = *c.timeout;
        auto ranks = MpiCommunicator::world(mpi);
        // a rank's stage on its GPU: the ranks of a node on distinct GPUs where there are enough
        const Device stage = c.device.is_gpu() ? gpu(c.gpus > 0 ? ranks.rank_on_node() % c.gpus : c.device.index)
                                               : cpu(0);
        MultiWorkerPipelineStrategy s{std::move(ranks), stage};
        const int world = s.num_replicas_in_sync();
        const int T = c.stage_tensor_parallel;
        if (c.stages && c.stages * c.data_parallel * T != world)
          throw Error("strata: pipeline under mpirun runs one stage" + std::string(T > 1 ? " member" : "") +
                      " per rank: " + std::to_string(c.stages) + " stages x " + std::to_string(c.data_parallel) +
                      " data-parallel copies" + (T > 1 ? " x " + std::to_string(T) + " tensor-parallel members" : "") +
                      " need " + std::to_string(c.stages * c.data_parallel * T) + " ranks, this job has " +
                      std::to_string(world));
        s.pipeline_options().micro_batches = c.micro_batches;
        s.pipeline_options().schedule = c.schedule;
        s.pipeline_options().data_parallel = static_cast<std::size_t>(c.data_parallel);
        s.pipeline_options().tensor_parallel = static_cast<std::size_t>(T);
        return fn(s);
      } else {
        throw Error("this program's code needs replicas that each run the whole model; it cannot run under "
                    "pipeline");
      }
    }
    // tensor_parallel under mpirun: each rank a worker of `replicas` (T when 0) replicas, its copies of the
    // model split over T of them, the copies data-parallel across the workers
    const bool tensor_across_ranks = name == "tensor_parallel" && detail::launched_ranks() > 1;
    if (name == "multi_worker_mirrored" || tensor_across_ranks) {
      MpiOptions mpi;
      if (c.timeout) mpi.timeout = *c.timeout;
      auto workers = MpiCommunicator::world(mpi);
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      if (tensor_across_ranks && c.replicas == 0) c.replicas = c.tensor_parallel;
      const int local = c.replicas > 0 ? c.replicas : std::max(1, cores / workers.ranks_on_node());
      // GPU replicas: `replicas` of them (1 when 0) per worker, spread over the GPUs (strata::gpu_replicas),
      // the workers of a node on distinct GPUs where there are enough
      const int gpu_first = workers.rank_on_node() * (c.replicas > 0 ? c.replicas : 1);
      MultiWorkerMirroredStrategy s{std::move(workers),
                                    c.device.is_gpu() ? gpu_replicas(c, gpu_first) : cpu_replicas(local),
                                    c.comm_options()};
      if (tensor_across_ranks) s.executor_options().tensor_parallel = static_cast<std::size_t>(c.tensor_parallel);
      return fn(s);
    }
    return InProcessStrategies::with(name, std::move(c), std::forward<F>(fn), names);
  }
};

//! Calls fn(strategy) with the strategy named `name`, the MPI strategies
//! included (see MpiStrategies::with), and returns what fn returns.
template <class F>
auto with_mpi_strategy(std::string_view name, StrategyChoice c, F&& fn) {
  return MpiStrategies::with(name, std::move(c), std::forward<F>(fn));
}

}  // namespace strata
