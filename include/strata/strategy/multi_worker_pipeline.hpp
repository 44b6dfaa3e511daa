#pragma once
//! MultiWorkerPipelineStrategy: a model's layers split into stages over the
//! ranks of an MPI job (one stage per rank). The strategy is
//! BasicMultiWorkerPipelineStrategy over MPI's communicator
//! (strategy/multi_worker_pipeline_basic.hpp; the MPI names: strategy/mpi.hpp).
//!   strata::MultiWorkerPipelineStrategy s;                 // every rank of mpirun -np S
//!   s.pipeline_options().micro_batches = 4;                // before making the model in its scope
//! Needs the strata-mpi dependency (STRATA_HAS_MPI).

#include <strata/strategy/mpi.hpp>
