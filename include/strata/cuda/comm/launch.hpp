#pragma once
//! The kernel behind the GPU replicas' direct collectives, declared for host
//! code (g++) and defined in include/strata/cuda/kernels/collectives.cuh,
//! which only nvcc sees (through include/strata/cuda/strata_cuda.cu).
//!   strata::cuda::detail::ReplicaBuffers<float> b{};  b.p = 2;  b.nout = 2;  ...
//!   strata::cuda::detail::launch_reduce_replicas(stream, strata::detail::OpKind::sum, b, n, 2);

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include <strata/comm/device/replica_buffers.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/core/half.hpp>

namespace strata::cuda::detail {

using strata::detail::max_device_replicas;
using strata::detail::ReplicaBuffers;

//! Enqueues on `s` the reduction of `n` elements of `b.p` inputs, in input
//! order (so the result is bitwise the host's detail::reduce_range), divided
//! by `contributors` for MEAN, written to each of the `b.nout` outputs. The
//! outputs may alias the inputs element for element (in place). Uses 16-byte
//! vector loads when every pointer is 16-byte aligned. Nothing for n == 0.
//! bf16 and fp16 (Sum only): added in FP32 in input order, rounded once.
template <class T>
void launch_reduce_replicas(cudaStream_t s, strata::detail::OpKind op, const ReplicaBuffers<T>& b, std::size_t n,
                            std::size_t contributors);

extern template void launch_reduce_replicas<float>(cudaStream_t, strata::detail::OpKind,
                                                   const ReplicaBuffers<float>&, std::size_t, std::size_t);
extern template void launch_reduce_replicas<double>(cudaStream_t, strata::detail::OpKind,
                                                    const ReplicaBuffers<double>&, std::size_t, std::size_t);
extern template void launch_reduce_replicas<std::int32_t>(cudaStream_t, strata::detail::OpKind,
                                                          const ReplicaBuffers<std::int32_t>&, std::size_t,
                                                          std::size_t);
extern template void launch_reduce_replicas<std::int64_t>(cudaStream_t, strata::detail::OpKind,
                                                          const ReplicaBuffers<std::int64_t>&, std::size_t,
                                                          std::size_t);
extern template void launch_reduce_replicas<bf16>(cudaStream_t, strata::detail::OpKind, const ReplicaBuffers<bf16>&,
                                                  std::size_t, std::size_t);
extern template void launch_reduce_replicas<fp16>(cudaStream_t, strata::detail::OpKind, const ReplicaBuffers<fp16>&,
                                                  std::size_t, std::size_t);

}  // namespace strata::cuda::detail
