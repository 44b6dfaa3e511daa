#pragma once
//! The strata core: tensors, policies, strategies and in-process collectives.
//!   #include <strata/strata.hpp>
//!   strata::MirroredStrategy strategy{strata::cpu_replicas(4)};
//! Opt-in, heavier parts: <strata/strategy/parameter_server.hpp>
//! (ParameterServerStrategy), <strata/strategy/by_name.hpp> (with_strategy),
//! <strata/strategy/multi_worker.hpp> and <strata/comm/mpi/...> (MPI).

#include <strata/core/build_config.hpp>  // <strata/config.hpp>, or defaults in a build by hand
#include <strata/core/concepts.hpp>
#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace_session.hpp>  // strata::trace::Session: the run's timeline
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/communicator.hpp>
#include <strata/policy/placement.hpp>
#include <strata/policy/reduce.hpp>
#include <strata/policy/sync.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/tensor/tensor.hpp>
