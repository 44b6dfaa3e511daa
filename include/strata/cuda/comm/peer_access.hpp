#pragma once
//! Peer access between GPUs of one process, for the collectives that read
//! and write another GPU's memory (the device team's kernels, NCCL's direct
//! pointers between ranks of one process). Peer access covers cudaMalloc
//! memory; the stream-ordered pool's memory (cudaMallocAsync, where replica
//! buffers live) needs its own grant per pool.
//!   if (strata::cuda::peer_access(0, 1)) strata::cuda::grant_pool_access(/*to=*/0, /*pool of=*/1);

#include <cuda_runtime_api.h>

#include <strata/cuda/error.hpp>

namespace strata::cuda {

//! Whether GPU `a` can read and write GPU `b`'s memory.
inline bool peer_access(int a, int b) {
  int can = 0;
  if (const cudaError_t e = cudaDeviceCanAccessPeer(&can, a, b); e != cudaSuccess) {
    detail::ignore(e);
    return false;
  }
  return can != 0;
}

//! Gives GPU `a` read and write access to the memory of GPU `b`'s default
//! stream-ordered pool (GPU a must have peer access to b).
inline void grant_pool_access(int a, int b) {
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, b), "cudaDeviceGetDefaultMemPool");
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = a;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  check(cudaMemPoolSetAccess(pool, &access, 1), "cudaMemPoolSetAccess");
}

}  // namespace strata::cuda
