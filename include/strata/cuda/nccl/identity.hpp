#pragma once
//! This process's view of a GPU as strata::GpuIdentity (comm/gpu_choice.hpp):
//! the host name, the CUDA index and the UUID in nvidia-smi's form
//! ("GPU-5e1c0a9b-..."), so that two ranks given the same physical GPU are
//! recognised whatever CUDA_VISIBLE_DEVICES renumbered, before NCCL sees them.
//!   strata::GpuIdentity id = strata::nccl::local_gpu(0);
//!   // {host: "node7", device: 0, uuid: "GPU-5e1c0a9b-7c1d-2f3e-8a9b-0c1d2e3f4a5b"}

#include <unistd.h>

#include <cstdio>
#include <string>

#include <strata/comm/gpu_choice.hpp>
#include <strata/cuda/nccl/error.hpp>
#include <strata/cuda/device.hpp>

namespace strata::nccl {

//! This host's name (gethostname), empty when it cannot be read.
//!   std::string h = strata::nccl::host_name();   // "node7"
inline std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

//! 16 UUID bytes as nvidia-smi writes them: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
//!   std::string u = strata::nccl::format_uuid(props.uuid.bytes);
inline std::string format_uuid(const char (&bytes)[16]) {
  std::string s = "GPU-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned>(static_cast<unsigned char>(bytes[i])));
    s += hex;
  }
  return s;
}

//! The identity of CUDA device `device` of this process; CudaError when
//! there is no such device.
//!   auto ids = std::vector{strata::nccl::local_gpu(0), strata::nccl::local_gpu(1)};
//!   strata::check_distinct_gpus(ids, "NcclTeam");
inline GpuIdentity local_gpu(int device) {
  cuda::require_device(device, "strata::nccl::local_gpu");
  cudaDeviceProp p{};
  cuda::check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  return GpuIdentity{.host = host_name(), .device = device, .uuid = format_uuid(p.uuid.bytes)};
}

}  // namespace strata::nccl
