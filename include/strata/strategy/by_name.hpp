#pragma once
//! Choosing an in-process strategy at run time, by name (a command line's
//! --strategy): the same generic code then runs under the strategy's type.
//!   return strata::with_strategy("mirrored", 4, [&](auto& strategy) { return train(strategy); });

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <strata/core/error.hpp>
#include <strata/strategy/parameter_server.hpp>
#include <strata/strategy/strategy.hpp>
#if defined(STRATA_MPI_ENABLED)  // set by the strata-mpi dependency
#include <algorithm>
#include <thread>

#include <cstdlib>

#include <strata/ps/mpi.hpp>
#include <strata/strategy/multi_worker.hpp>
#endif

namespace strata {

//! The names with_strategy accepts ("multi_worker_mirrored" where built with the MPI backend).
#if defined(STRATA_MPI_ENABLED)
inline constexpr std::array<std::string_view, 6> strategy_names{
    "default", "one_device", "mirrored", "central_storage", "parameter_server", "multi_worker_mirrored"};
#else
inline constexpr std::array<std::string_view, 5> strategy_names{"default", "one_device", "mirrored",
                                                                "central_storage", "parameter_server"};
#endif

//! What with_strategy needs besides the name.
struct StrategyChoice {
  int replicas = 0;  //!< mirrored / central_storage / multi_worker_mirrored: replicas (0: by cores)
  int workers = 2;   //!< parameter_server: worker threads
  int servers = 1;   //!< parameter_server: server shards' hosts
  std::optional<std::uint64_t> staleness = std::nullopt;  //!< parameter_server: bound (none: asynchronous)
  std::string cluster = {};  //!< parameter_server under mpirun: a ClusterSpec ("": chief 0, `servers` servers, workers)
};

namespace detail {
//! The size of the MPI job this process was started in (1 when not under mpirun).
inline int launched_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}
}  // namespace detail

//! Calls fn(strategy) with the strategy named `name` ("default": get_strategy();
//! "one_device": cpu(0); "mirrored" / "central_storage": `replicas` CPU replicas,
//! 0 for one per core; "parameter_server": `workers` worker threads and
//! `servers` servers in this process, `staleness` its bound; "multi_worker_mirrored": this process is one worker of
//! the MPI job with `replicas` local replicas, 0 for its share of the node's
//! cores) and returns what fn returns (the same type for every
//! strategy). An unknown name throws strata::Error listing the known ones.
template <class F>
auto with_strategy(std::string_view name, StrategyChoice c, F&& fn) -> std::invoke_result_t<F&, DefaultStrategy&> {
  const int replicas = c.replicas;
  if (name == "default") return fn(get_strategy());
  if (name == "one_device") {
    OneDeviceStrategy s{cpu(0)};
    return fn(s);
  }
  if (name == "mirrored") {
    MirroredStrategy s{cpu_replicas(replicas)};
    return fn(s);
  }
  if (name == "central_storage") {
    CentralStorageStrategy s{cpu_replicas(replicas)};
    return fn(s);
  }
  if (name == "parameter_server") {
    if constexpr (std::is_invocable_v<F&, ParameterServerStrategy&>) {
      const ParameterServerOptions o{.workers = c.workers, .servers = c.servers, .staleness = c.staleness};
#if defined(STRATA_MPI_ENABLED)
      if (detail::launched_ranks() > 1 || !c.cluster.empty()) {  // under mpirun: ranks are the roles
        (void)detail::mpi::runtime();
        int world = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        MpiParameterServers rt{c.cluster.empty() ? ClusterSpec::from_counts(c.servers, world)
                                                 : ClusterSpec::parse(c.cluster, world),
                               o};
        ParameterServerStrategy s{rt};
        return fn(s);
      }
#endif
      ParameterServerStrategy s{o};
      return fn(s);
    } else {
      throw Error("this program's code needs synchronous replicas (Strategy::run); it cannot run under "
                  "parameter_server");
    }
  }
#if defined(STRATA_MPI_ENABLED)
  if (name == "multi_worker_mirrored") {
    auto workers = MpiCommunicator::world();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int local = replicas > 0 ? replicas : std::max(1, cores / workers.ranks_on_node());
    MultiWorkerMirroredStrategy s{std::move(workers), cpu_replicas(local)};
    return fn(s);
  }
#endif
  std::string known;
  for (auto n : strategy_names) known += (known.empty() ? "" : ", ") + std::string(n);
  throw Error("unknown strategy '" + std::string(name) + "' (known: " + known + ")");
}
template <class F>
auto with_strategy(std::string_view name, int replicas, F&& fn) {
  return with_strategy(name, StrategyChoice{.replicas = replicas}, std::forward<F>(fn));
}

}  // namespace strata
