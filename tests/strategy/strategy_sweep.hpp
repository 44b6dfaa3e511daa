// One test body under every in-process strategy of the catalogue
// (strata/strategy/catalog.hpp), each built by strata::with_strategy as a
// command line would build it, with replica counts small enough for a
// 2-core machine. A strategy that cannot run a body is left out by a
// property of the catalogue the body names (Needs), never by a list of names:
// a strategy added to the catalogue runs every body it can.
//   strata_test::for_each_strategy({.synchronous = true}, [&](auto& s, const strata::StrategyInfo& info) {
//     CHECK(train(s) == reference);
//   });
// for_each_strategy_and_backend runs it on every backend too: CPU replicas,
// and, for each row whose replicas may be GPUs (StrategyInfo::gpu()), GPU
// replicas computing on the host (host_as_gpu.hpp, which a test of strata::nn
// includes: it needs the BLAS), as a machine without a GPU (CI) runs the
// GPU executors.
//   strata_test::for_each_strategy_and_backend({.synchronous = true},
//       [&](auto& s, const strata::StrategyInfo& info, strata_test::Backend b) { CHECK(train(s) == reference); });
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include <strata/strategy/by_name.hpp>
#include <strata/strategy/catalog.hpp>

namespace strata_test {

class HostAsGpu;  // host_as_gpu.hpp (not included here: the host's compute needs the BLAS, this header does not)

//! What a body needs of a strategy (each a property of the catalogue).
struct Needs {
  //! Lock-step replicas on one global batch split over them: the steps of
  //! one replica, bitwise, a run that repeats bitwise (leaves out
  //! parameter_server, and tensor_parallel: equal within float rounding).
  bool synchronous = false;
  //! Every replica runs the whole model (leaves out pipeline, whose stages
  //! each need a layer of their own).
  bool whole_model = false;

  [[nodiscard]] bool met_by(const strata::StrategyInfo& s) const {
    return !s.needs_mpi && (!synchronous || (s.synchronous && s.exact)) && (!whole_model || s.whole_model);
  }
};

//! The choice each strategy of a sweep is built with: `replicas` replicas
//! (mirrored, central_storage), 2 workers and 1 server (parameter_server),
//! 2 stages of 2 micro-batches (pipeline), copies split over 2 replicas
//! (tensor_parallel; an odd count: one copy over all of them).
inline strata::StrategyChoice small_choice(int replicas = 2) {
  return {.replicas = replicas, .workers = 2, .servers = 1, .stages = 2, .micro_batches = 2,
          .tensor_parallel = replicas % 2 == 0 ? 2 : replicas};
}

//! The names of the in-process strategies that meet `needs`, in catalogue order.
inline std::vector<std::string> strategies_meeting(Needs needs) {
  std::vector<std::string> out;
  for (const auto& info : strata::strategy_catalog)
    if (needs.met_by(info)) out.emplace_back(info.name);
  return out;
}

//! Calls body(strategy, info) under every in-process strategy of the
//! catalogue that meets `needs`, each built by with_strategy(info.name,
//! choice); a failure names the strategy. Returns how many ran (a sweep
//! that runs none fails).
template <class Body>
int for_each_strategy(Needs needs, Body&& body, strata::StrategyChoice choice = small_choice()) {
  int ran = 0;
  for (const auto& info : strata::strategy_catalog) {
    if (!needs.met_by(info)) continue;
    INFO("under strategy ", std::string(info.name));
    strata::with_strategy(info.name, choice, [&](auto& s) { body(s, info); });
    ++ran;
  }
  CHECK_MESSAGE(ran > 0, "no strategy of the catalogue meets the sweep's needs");
  return ran;
}

//! Where a sweep runs a strategy's replicas.
enum class Backend {
  Cpu,        //!< "cpu": CPU replicas, as the choice says
  HostAsGpu,  //!< "host-as-gpu": GPU replicas (gpu_choice) computing on stand-ins, summing through the device team
};

//! The backend's name in a failure message: "cpu" or "host-as-gpu".
[[nodiscard]] constexpr std::string_view backend_name(Backend b) noexcept {
  return b == Backend::Cpu ? "cpu" : "host-as-gpu";
}

//! `choice` with its replicas on GPUs: device gpu(0), spread over 2 GPUs
//! (replica r on gpu(r % 2)), as --device gpu builds them on a 2-GPU node.
inline strata::StrategyChoice gpu_choice(strata::StrategyChoice choice) {
  choice.device = strata::gpu(0);
  choice.gpus = 2;
  return choice;
}

//! One run of a backend sweep: a catalogue row on a backend.
struct SweepRun {
  const strata::StrategyInfo* info;
  Backend backend;
};

//! The runs for_each_strategy_and_backend makes for `needs`, in its order:
//! each in-process row that meets them on CPUs, then, where its gpu(), on
//! GPU replicas.
inline std::vector<SweepRun> backend_sweep(Needs needs) {
  std::vector<SweepRun> out;
  for (const auto& info : strata::strategy_catalog) {
    if (!needs.met_by(info)) continue;
    out.push_back({&info, Backend::Cpu});
    if (info.gpu()) out.push_back({&info, Backend::HostAsGpu});
  }
  return out;
}

//! Calls body(strategy, info, backend) for each run of backend_sweep(needs):
//! on CPUs the strategy with_strategy(info.name, choice) builds, on GPUs
//! the one with_strategy(info.name, gpu_choice(choice)) builds, under an
//! OnGpus (HostAsGpu: include host_as_gpu.hpp); a failure names the strategy
//! and the backend. Returns how many ran (a sweep that runs none fails).
template <class Body, class OnGpus = HostAsGpu>
int for_each_strategy_and_backend(Needs needs, Body&& body, strata::StrategyChoice choice = small_choice()) {
  int ran = 0;
  for (const SweepRun& run : backend_sweep(needs)) {
    const strata::StrategyInfo& info = *run.info;
    const Backend b = run.backend;
    INFO("under strategy ", std::string(info.name), " on ", std::string(backend_name(b)));
    if (b == Backend::Cpu) {
      strata::with_strategy(info.name, choice, [&](auto& s) { body(s, info, b); });
    } else {
      const OnGpus on_gpus;
      strata::with_strategy(info.name, gpu_choice(choice), [&](auto& s) { body(s, info, b); });
    }
    ++ran;
  }
  CHECK_MESSAGE(ran > 0, "no strategy of the catalogue meets the sweep's needs");
  return ran;
}

}  // namespace strata_test
