#pragma once
//! MultiWorkerMirroredStrategy: synchronous data parallelism across
//! processes (workers, launched by mpirun), each running p local replicas;
//! the hierarchical all-reduce over MPI between workers. The strategy is
//! BasicMultiWorkerMirroredStrategy over MPI's communicator
//! (strategy/multi_worker_basic.hpp; the MPI names: strategy/mpi.hpp).
//!   strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2)};   // under mpirun -np N
//!   s.run([&](auto& ctx) { ctx.all_reduce(grad, strata::Sum); });    // over 2N replicas

#include <strata/strategy/mpi.hpp>
