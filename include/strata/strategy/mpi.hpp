#pragma once
//! The multi-worker strategies over MPI: the names programs use, each the
//! template over a WorkerCommunicator (comm/workers.hpp) with MPI's
//! communicator. The one strategy header that names MpiCommunicator;
//! strategy/multi_worker.hpp and strategy/multi_worker_pipeline.hpp include
//! it. A second transport is another model of the concept and aliases of its own.
//!   strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2)};   // under mpirun -np N
//!   strata::MultiWorkerPipelineStrategy p;                            // a stage per rank
//! Their options (MultiWorkerOptions: `mpi` across workers, `local` within
//! one) are made beside MpiCommunicator (comm/mpi/communicator.hpp), so that
//! every program naming the one sees the other.
//! Needs the strata-mpi dependency (STRATA_HAS_MPI).

#include <strata/comm/mpi/communicator.hpp>  // first: the #error naming -Dmpi=enabled when the backend is off

#include <strata/strategy/multi_worker_basic.hpp>
#include <strata/strategy/multi_worker_pipeline_basic.hpp>

namespace strata {

//! Synchronous data parallelism across MPI ranks (strategy/multi_worker_basic.hpp).
using MultiWorkerMirroredStrategy = BasicMultiWorkerMirroredStrategy<MpiCommunicator>;
using MultiWorkerReplicaContext = BasicMultiWorkerReplicaContext<MpiCommunicator>;
//! A model's stages on MPI ranks (strategy/multi_worker_pipeline_basic.hpp).
using MultiWorkerPipelineStrategy = BasicMultiWorkerPipelineStrategy<MpiCommunicator>;
using MultiWorkerPipelineContext = BasicMultiWorkerPipelineContext<MpiCommunicator>;

}  // namespace strata
