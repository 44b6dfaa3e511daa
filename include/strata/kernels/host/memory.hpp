#pragma once
//! HostMemory: the host's Memory (kernels/memory.hpp), without BLAS: where
//! the executors keep CPU replicas' variables, gradients and shards (a
//! program of the core alone, with a model program of its own, trains
//! without a CBLAS). HostCompute (host/compute.hpp) has the same memory
//! operations, from the same mixin. One instance serves every replica.
//!   strata::kernels::Buffer<float> w{strata::kernels::host_memory(), strata::Shape{n}};

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include <strata/kernels/host/maps.hpp>
#include <strata/kernels/memory.hpp>
#include <strata/tensor/space.hpp>

namespace strata::kernels {

//! The host's memory operations, for a Memory or a Compute (`Base`).
template <class Base>
class HostMemoryOps : public Base {
 public:
  [[nodiscard]] Where where() const noexcept override { return Where::Host; }
  [[nodiscard]] std::string name() const override { return "host"; }
  [[nodiscard]] void* allocate(std::size_t bytes) override { return HostSpace::allocate(bytes); }
  void deallocate(void* p, std::size_t bytes) noexcept override { HostSpace::deallocate(p, bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void fill(float* x, float value, std::size_t n) override { std::fill_n(x, n, value); }
  void synchronize() override {}
  void count_nonfinite(const float* x, std::size_t n, double* acc) override {
    *acc += static_cast<double>(host::count_nonfinite(x, n));
  }
};

class HostMemory final : public HostMemoryOps<Memory> {};

//! The one HostMemory (stateless).
inline HostMemory& host_memory() {
  static HostMemory m;
  return m;
}

}  // namespace strata::kernels
