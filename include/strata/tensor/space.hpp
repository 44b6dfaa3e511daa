#pragma once
//! Memory spaces: where a tensor's elements live. A space opts in explicitly
//! (`using memory_space = Self;`) and provides allocate/deallocate. The host
//! space is always available; a CUDA space is added by the CUDA backend with
//! the same interface, so tensor code does not change.

#include <concepts>
#include <cstddef>
#include <new>

namespace strata {

//! A type that opts into being a memory space.
template <class S>
concept MemorySpace = requires(std::size_t bytes, void* p) {
  typename S::memory_space;
  requires std::same_as<typename S::memory_space, S>;
  { S::name } -> std::convertible_to<const char*>;
  { S::host_accessible } -> std::convertible_to<bool>;
  { S::allocate(bytes) } -> std::same_as<void*>;
  { S::deallocate(p, bytes) } -> std::same_as<void>;
};

//! Ordinary host memory, aligned to a 64-byte cache line so that vector
//! loops and per-replica slices start on a line boundary.
struct HostSpace {
  using memory_space = HostSpace;
  static constexpr const char* name = "host";
  static constexpr bool host_accessible = true;
  static constexpr std::size_t alignment = 64;

  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    return ::operator new(bytes, std::align_val_t{alignment});
  }
  static void deallocate(void* p, std::size_t /*bytes*/) noexcept {
    if (p) ::operator delete(p, std::align_val_t{alignment});
  }
};

static_assert(MemorySpace<HostSpace>);

}  // namespace strata
