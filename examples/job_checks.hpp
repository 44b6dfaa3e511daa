// What the examples check of the job they run in before any data is loaded,
// shared by mnist_mlp, mnist_cnn and char_lm:
//  - agree_across_ranks: under mpirun every rank compares the options that
//    change what is trained (example::options_that_must_match) with every
//    other rank's; a difference ends the job in one sentence naming the
//    option, its values and the ranks, exit status 2, before any rank
//    trains (not later, inside a collective that names no option). It also
//    tells every rank whether the chief writes --save, so that a rank not
//    given --save still joins a collective read of sharded weights.
//  - check_job_shape: a pipeline's stages fit the ranks and the model's layers.
//  - save_weights_on_chief: --save, written by the chief, joined by every rank where that is collective.
//   const auto agreed = example::agree_across_ranks(argv[0], a);   // every rank calls it
//   example::check_job_shape<Strategies>(argv[0], a, make_model().layers().size());
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <strata/strategy/catalog.hpp>

#include "example_cli.hpp"
#if STRATA_HAS_MPI && __has_include(<mpi.h>)  // (examples/mnist_common.cpp is also compiled without MPI)
#define EXAMPLE_JOB_MPI 1
#include <strata/comm/mpi/fingerprint.hpp>
#include <strata/strategy/by_name_mpi.hpp>
#else
#define EXAMPLE_JOB_MPI 0
#endif

namespace example {

//! What the ranks of a job agreed on.
struct RankAgreement {
  //! Whether the chief (rank 0) writes --save: every rank then joins reading
  //! the weights where that is collective (ZeRO 3 across workers).
  bool chief_saves = false;
};

//! Collective under mpirun (every rank calls it, before loading data): the
//! ranks' options_that_must_match(a) compared; a difference is a command-line
//! mistake (one sentence, exit 2 on every rank). In one process: nothing to compare.
inline RankAgreement agree_across_ranks(const char* prog, const Args& a) {
  RankAgreement agreed{.chief_saves = !a.save.empty()};
#if EXAMPLE_JOB_MPI
  if (strata::MpiStrategies::launched_ranks() <= 1) return agreed;
  std::string why;
  {
    strata::MpiOptions o;
    if (a.timeout) o.timeout = *a.timeout;
    auto world = strata::MpiCommunicator::world(o);
    const auto fields = options_that_must_match(a);
    constexpr std::size_t per = strata::detail::mpi::FingerprintWire::max_fields;
    for (std::size_t first = 0; first < fields.size() && why.empty(); first += per) {
      const std::vector<strata::RunField> part(
          fields.begin() + static_cast<std::ptrdiff_t>(first),
          fields.begin() + static_cast<std::ptrdiff_t>(std::min(fields.size(), first + per)));
      const auto mine = strata::detail::mpi::encode_fingerprint(part);
      std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(world.size()));
      world.all_gather(mine, all);
      why = strata::detail::mpi::fingerprint_mismatch(all, world.size(), "command line");
    }
    if (why.empty()) {  // (every rank saw the same gather: all of them are here)
      std::int64_t saves[1] = {a.save.empty() ? 0 : 1};
      world.broadcast(std::span<std::int64_t>(saves), 0);
      agreed.chief_saves = saves[0] != 0;
    }
  }  // (the communicator is freed before the exit)
  if (!why.empty()) fail(prog, why + ": every rank of an mpirun job must be given the same options");
#else
  (void)prog;
#endif
  return agreed;
}

//! --save after training: the chief writes FILE; where reading the weights
//! is collective (ZeRO 3 across workers) every other rank joins that read
//! when the chief saves, whether or not it was given --save itself.
template <class M>
void save_weights_on_chief(M& model, const Args& a, const RankAgreement& agreed, bool chief) {
  if (chief) {
    if (a.save.empty()) return;
    model.save_weights(a.save);
    std::printf("weights saved to %s\n", a.save.c_str());
  } else if (agreed.chief_saves && model.state_reads_collective()) {
    (void)model.get_weights();  // the chief's save_weights gathers them from every worker
  }
}

//! The job's shape, said in the options the user set: --workers is not an
//! option of parameter servers across ranks; for a strategy that splits the
//! model into stages (the catalogue's pipeline) the stages fit this job's
//! ranks and the model's `layers` (every stage needs one).
template <class Strategies>
void check_job_shape(const char* prog, const Args& a, std::size_t layers) {
  if constexpr (requires { Strategies::parameter_server_across_ranks(a.strategy, choice_of(a)); })
    if (a.has("--workers") && Strategies::parameter_server_across_ranks(a.strategy, choice_of(a)))
      fail(prog, "--workers does not apply to parameter_server across the ranks of an MPI job: its worker "
                 "ranks are the workers (see --servers, --cluster)");
  const auto* info = strata::find_strategy(a.strategy);
  if (!info || info->whole_model) return;
  const int ranks = Strategies::launched_ranks();
  const int d = a.data_parallel;
  if (ranks > 1 && ranks % d)
    fail(prog, "--data-parallel " + std::to_string(d) + " does not divide the " + std::to_string(ranks) +
                   " ranks of this mpirun job (one stage per rank): expected a divisor of " + std::to_string(ranks));
  if (ranks > 1 && a.has("--stages") && a.stages * d != ranks)
    fail(prog, "--stages " + std::to_string(a.stages) + " x --data-parallel " + std::to_string(d) + " makes " +
                   std::to_string(a.stages * d) + " stages, but under mpirun each rank runs one stage and this "
                   "job has " + std::to_string(ranks) + " ranks: expected --stages " + std::to_string(ranks / d) +
                   " (or leave --stages out)");
  if (const int stages = Strategies::pipeline_stages(choice_of(a)); static_cast<std::size_t>(stages) > layers) {
    const std::string most = std::to_string(layers);
    if (a.has("--stages") || ranks == 1)
      fail(prog, "--stages " + std::to_string(stages) + (a.has("--stages") ? "" : " (the default)") +
                     " is more than the model's " + most + " layers (every stage needs one): expected --stages 1 "
                     "to " + most);
    fail(prog, "this mpirun job's " + std::to_string(ranks) + " ranks make " + std::to_string(stages) +
                   " pipeline stages (one per rank" + (d > 1 ? ", over --data-parallel " + std::to_string(d) : "") +
                   "), more than the model's " + most + " layers (every stage needs one): expected at most " +
                   std::to_string(layers * static_cast<std::size_t>(d)) + " ranks (mpirun -np)");
  }
}

}  // namespace example
