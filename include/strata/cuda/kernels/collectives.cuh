#pragma once
//! The direct reduce kernel of GPU replicas that share a memory (virtual
//! GPUs on one device, or GPUs with peer access): each replica reduces its
//! shard of every replica's buffer, in replica order, and writes the result
//! into every replica's output; 16-bit elements (compression's) are added in
//! FP32 and rounded once, as the host's reduce_range. nvcc only (strata_cuda.cu).
//!   launch_reduce_replicas(stream, OpKind::sum, buffers, n, p);

#include <strata/cuda/comm/launch.hpp>
#include <strata/cuda/kernels/common.cuh>

namespace strata::cuda::detail {

//! W elements of T loaded and stored as one (16-byte) access.
template <class T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

template <class T, strata::detail::OpKind K, int W>
__global__ void reduce_replicas_kernel(ReplicaBuffers<T> b, std::size_t packs, T divisor) {
  using P = Pack<T, W>;
  for (std::size_t i = global_index(); i < packs; i += grid_stride()) {
    P acc = reinterpret_cast<const P*>(b.in[0])[i];
    for (int s = 1; s < b.p; ++s) {
      const P x = reinterpret_cast<const P*>(b.in[s])[i];
#pragma unroll
      for (int k = 0; k < W; ++k) acc.v[k] = strata::detail::op_of<K>::combine(acc.v[k], x.v[k]);  // the host's combine
    }
    if constexpr (K == strata::detail::OpKind::mean) {
#pragma unroll
      for (int k = 0; k < W; ++k) acc.v[k] /= divisor;
    }
    for (int o = 0; o < b.nout; ++o) reinterpret_cast<P*>(b.out[o])[i] = acc;
  }
}

//! bf16 or fp16 (Sum): each element added in FP32 in replica order, rounded once.
template <class T, int W>
__global__ void reduce_replicas_wire_kernel(ReplicaBuffers<T> b, std::size_t packs) {
  using P = Pack<T, W>;
  for (std::size_t i = global_index(); i < packs; i += grid_stride()) {
    const P first = reinterpret_cast<const P*>(b.in[0])[i];
    float acc[W];
#pragma unroll
    for (int k = 0; k < W; ++k) acc[k] = static_cast<float>(first.v[k]);
    for (int s = 1; s < b.p; ++s) {
      const P x = reinterpret_cast<const P*>(b.in[s])[i];
#pragma unroll
      for (int k = 0; k < W; ++k) acc[k] = __fadd_rn(acc[k], static_cast<float>(x.v[k]));
    }
    P sum;
#pragma unroll
    for (int k = 0; k < W; ++k) sum.v[k] = T(acc[k]);
    for (int o = 0; o < b.nout; ++o) reinterpret_cast<P*>(b.out[o])[i] = sum;
  }
}

//! The kernel over `packs` packs of W elements: the 16-bit one for bf16 and fp16.
template <class T, strata::detail::OpKind K, int W>
void launch_packs(cudaStream_t s, const ReplicaBuffers<T>& b, std::size_t packs, T divisor, const char* what) {
  if constexpr (Half16<T>) {
    (void)divisor;
    reduce_replicas_wire_kernel<T, W><<<blocks_for(packs), block_threads, 0, s>>>(b, packs);
  } else {
    reduce_replicas_kernel<T, K, W><<<blocks_for(packs), block_threads, 0, s>>>(b, packs, divisor);
  }
  check_launch(what);
}

template <class T, strata::detail::OpKind K>
void launch_reduce_op(cudaStream_t s, const ReplicaBuffers<T>& b, std::size_t n, std::size_t contributors) {
  constexpr int W = 16 / sizeof(T);
  bool aligned = true;
  for (int i = 0; i < b.p; ++i) aligned = aligned && reinterpret_cast<std::uintptr_t>(b.in[i]) % 16 == 0;
  for (int i = 0; i < b.nout; ++i) aligned = aligned && reinterpret_cast<std::uintptr_t>(b.out[i]) % 16 == 0;
  T divisor{};
  if constexpr (!Half16<T>) divisor = static_cast<T>(contributors);
  std::size_t done = 0;
  if (aligned && n >= static_cast<std::size_t>(W)) {
    const std::size_t packs = n / W;
    launch_packs<T, K, W>(s, b, packs, divisor, "reduce_replicas_kernel (16-byte packs)");
    done = packs * W;
  }
  if (done < n) {  // unaligned buffers, or the tail after the packs
    ReplicaBuffers<T> t = b;
    for (int i = 0; i < b.p; ++i) t.in[i] += done;
    for (int i = 0; i < b.nout; ++i) t.out[i] += done;
    launch_packs<T, K, 1>(s, t, n - done, divisor, "reduce_replicas_kernel");
  }
}

template <class T>
void launch_reduce_replicas(cudaStream_t s, strata::detail::OpKind op, const ReplicaBuffers<T>& b, std::size_t n,
                            std::size_t contributors) {
  using strata::detail::OpKind;
  if (n == 0) return;
  if constexpr (Half16<T>) {
    if (op == OpKind::sum) return launch_reduce_op<T, OpKind::sum>(s, b, n, contributors);
  } else {
    switch (op) {
      case OpKind::sum: return launch_reduce_op<T, OpKind::sum>(s, b, n, contributors);
      case OpKind::mean:
        if constexpr (std::is_floating_point_v<T>) return launch_reduce_op<T, OpKind::mean>(s, b, n, contributors);
        break;
      case OpKind::min: return launch_reduce_op<T, OpKind::min>(s, b, n, contributors);
      case OpKind::max: return launch_reduce_op<T, OpKind::max>(s, b, n, contributors);
      case OpKind::product: return launch_reduce_op<T, OpKind::product>(s, b, n, contributors);
    }
  }
  throw Error("launch_reduce_replicas: operation " + std::string(strata::detail::op_name(op)) +
              " is not defined for this element type");
}

template void launch_reduce_replicas<float>(cudaStream_t, strata::detail::OpKind, const ReplicaBuffers<float>&,
                                            std::size_t, std::size_t);
template void launch_reduce_replicas<double>(cudaStream_t, strata::detail::OpKind, const ReplicaBuffers<double>&,
                                             std::size_t, std::size_t);
template void launch_reduce_replicas<std::int32_t>(cudaStream_t, strata::detail::OpKind,
                                                   const ReplicaBuffers<std::int32_t>&, std::size_t, std::size_t);
template void launch_reduce_replicas<std::int64_t>(cudaStream_t, strata::detail::OpKind,
                                                   const ReplicaBuffers<std::int64_t>&, std::size_t, std::size_t);
template void launch_reduce_replicas<bf16>(cudaStream_t, strata::detail::OpKind, const ReplicaBuffers<bf16>&,
                                           std::size_t, std::size_t);
template void launch_reduce_replicas<fp16>(cudaStream_t, strata::detail::OpKind, const ReplicaBuffers<fp16>&,
                                           std::size_t, std::size_t);

}  // namespace strata::cuda::detail
