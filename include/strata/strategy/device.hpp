#pragma once
//! Devices a strategy places replicas on. Only CPU replicas exist in the
//! core; GPU devices arrive with the CUDA backend.

#include <string>
#include <thread>
#include <vector>

#include <strata/core/error.hpp>

namespace strata {

//! One execution context: a CPU replica is a thread.
struct Device {
  enum class Kind { cpu };
  Kind kind = Kind::cpu;
  int index = 0;
  [[nodiscard]] std::string str() const { return "/cpu:" + std::to_string(index); }
  friend bool operator==(const Device&, const Device&) = default;
};

//! The CPU replica `i`.
inline Device cpu(int i = 0) { return Device{Device::Kind::cpu, i}; }

//! `n` CPU replicas; n = 0 means one per hardware thread.
//!   strata::MirroredStrategy s{strata::cpu_replicas(4)};
inline std::vector<Device> cpu_replicas(int n = 0) {
  if (n < 0) throw Error("strata::cpu_replicas: the replica count must be positive, got " + std::to_string(n));
  if (n == 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu(i));
  return d;
}

}  // namespace strata
