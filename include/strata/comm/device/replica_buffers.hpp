#pragma once
//! What one reduce of a device team works on (comm/device/communicator.hpp):
//! the inputs and outputs of its replicas, already offset to the elements
//! it reduces, and the most replicas a team holds. A runtime's reduce
//! (CUDA's kernel, the stand-in's host loop) writes
//! out[o][i] = in[0][i] (op) in[1][i] ... (op) in[p-1][i] for o < nout.
//!   strata::detail::ReplicaBuffers<float> b{};  b.p = 2;  b.nout = 2;
//!   b.in[0] = a;  b.in[1] = c;  b.out[0] = a;  b.out[1] = c;   // in place
//!   Runtime::reduce(stream, strata::detail::OpKind::sum, b, n, 2);

namespace strata::detail {

//! The most replicas one device team holds: their pointers ride in a CUDA
//! kernel's parameters (2 x 32 pointers = 512 bytes, well under the limit).
inline constexpr int max_device_replicas = 32;

template <class T>
struct ReplicaBuffers {
  const T* in[max_device_replicas];
  T* out[max_device_replicas];
  int p = 0;
  int nout = 0;
};

}  // namespace strata::detail
