#pragma once
//! Devices a strategy places replicas on: CPU replicas (threads) and GPUs.
//! A GPU replica needs the CUDA backend (<strata/cuda.hpp> and strata's
//! CUDA kernels linked); naming one costs nothing without it.

#include <algorithm>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include <strata/core/error.hpp>

namespace strata {

//! One execution context: a CPU replica is a thread, a GPU replica a CUDA
//! device (its stream, cuBLAS handle and memory pool).
struct Device {
  enum class Kind { cpu, gpu };
  Kind kind = Kind::cpu;
  int index = 0;
  [[nodiscard]] bool is_gpu() const noexcept { return kind == Kind::gpu; }
  [[nodiscard]] std::string str() const { return (is_gpu() ? "/gpu:" : "/cpu:") + std::to_string(index); }
  friend bool operator==(const Device&, const Device&) = default;
};

//! The CPU replica `i`.
inline Device cpu(int i = 0) { return Device{Device::Kind::cpu, i}; }
//! The CUDA device `i`.
//!   strata::OneDeviceStrategy s{strata::gpu(0)};
inline Device gpu(int i = 0) {
  if (i < 0) throw Error("strata::gpu: a device index is >= 0, got " + std::to_string(i));
  return Device{Device::Kind::gpu, i};
}

//! `n` replicas on GPU `device` ("virtual GPUs", as TensorFlow's logical
//! devices): each its own stream and buffers in the same memory, reduced
//! by a kernel over their buffers (cuda/comm/device_team.hpp). How a
//! machine with one GPU runs several GPU replicas.
//!   strata::DeviceTeam team{strata::virtual_gpus(0, 4)};
inline std::vector<Device> virtual_gpus(int device, int n) {
  if (n < 1) throw Error("strata::virtual_gpus: the replica count must be positive, got " + std::to_string(n));
  return std::vector<Device>(static_cast<std::size_t>(n), gpu(device));
}

//! One replica on each of the GPUs `devices`.
//!   strata::DeviceTeam team{strata::gpus({0, 1})};   // needs peer access between 0 and 1
inline std::vector<Device> gpus(const std::vector<int>& devices) {
  if (devices.empty()) throw Error("strata::gpus: name at least one GPU");
  std::vector<Device> d;
  for (int i : devices) d.push_back(gpu(i));
  return d;
}

//! `n` CPU replicas; n = 0 means one per hardware thread.
//!   strata::MirroredStrategy s{strata::cpu_replicas(4)};
inline std::vector<Device> cpu_replicas(int n = 0) {
  if (n < 0) throw Error("strata::cpu_replicas: the replica count must be positive, got " + std::to_string(n));
  if (n == 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu(i));
  return d;
}

//! CPU replicas for training at `global_batch` rows per step: one per
//! hardware thread, but no more than leave each replica `min_rows` rows.
//! A replica's step has a fixed cost (waking it, its share of every
//! reduction, its row copies) while its work shrinks with its rows, so past
//! a point more replicas make a step slower: measured on a 16-core Xeon, the
//! MNIST MLP at batch 128 ran fastest on 4 replicas (32 rows each) and
//! slower on 8 and 16 (docs/performance.md).
//!   strata::MirroredStrategy s{strata::cpu_replicas_for_batch(128)};   // 4 on 16 cores, 2 on 2
inline std::vector<Device> cpu_replicas_for_batch(std::size_t global_batch, std::size_t min_rows = 32) {
  const auto cores = static_cast<std::size_t>(std::max(1u, std::thread::hardware_concurrency()));
  const std::size_t by_rows = min_rows ? global_batch / min_rows : cores;
  return cpu_replicas(static_cast<int>(std::clamp<std::size_t>(by_rows, 1, cores)));
}

namespace detail {
//! The GPU index of each of `replicas`, for a device team (`who` names it in
//! the error a CPU replica is).
inline std::vector<int> gpu_indices(const std::vector<Device>& replicas, const char* who) {
  std::vector<int> d;
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    if (!replicas[r].is_gpu())
      throw Error(std::string(who) + ": replica " + std::to_string(r) + " is " + replicas[r].str() +
                  "; a device team holds GPU replicas (CPU replicas use the thread team)");
    d.push_back(replicas[r].index);
  }
  return d;
}
}  // namespace detail

}  // namespace strata
