#pragma once
//! The NCCL backend, opt in (with the CUDA backend): NcclCommunicator and
//! NcclTeam (cuda/nccl/), and, once included, MirroredStrategy's replicas on
//! distinct GPUs sum their gradients with NCCL (replicas sharing a GPU keep
//! the direct kernel: NCCL cannot have two ranks on one GPU). Link
//! strata-nccl (Meson: dependency('strata-nccl')).
//!   #include <strata/nccl.hpp>
//!   strata::MirroredStrategy s{strata::gpus({0, 1})};   // NCCL between GPU 0 and GPU 1

#include <strata/cuda/nccl/collectives.hpp>
#include <strata/cuda/nccl/communicator.hpp>
#include <strata/cuda/nccl/team.hpp>
#include <strata/cuda.hpp>

namespace strata::detail {

//! Replaces the CUDA backend's collectives with NCCL's (after cuda.hpp's
//! registration, which this header includes first).
inline const bool nccl_collectives_registered = [] {
  (void)strata::cuda::detail::backend_registered;
  gpu_backend().make_collectives = &strata::nccl::make_collectives;
  return true;
}();

}  // namespace strata::detail
