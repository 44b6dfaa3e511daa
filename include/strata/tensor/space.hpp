#pragma once
//! Memory spaces: where a tensor's elements live. A space opts in explicitly
//! (`using memory_space = Self;`) and provides allocate/deallocate. The host
//! space is always available; a CUDA space is added by the CUDA backend with
//! the same interface, so tensor code does not change.

#include <concepts>
#include <cstddef>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

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

namespace detail {
//! Recently freed large host blocks, kept for the next request of the same
//! size. A training step frees and allocates the same large tensors every
//! step (a batch of 128 MNIST images is 401 KiB); glibc serves such sizes
//! with fresh mmapped pages unless its dynamic threshold happened to be
//! raised, and then every step pays page faults and the kernel's zeroing
//! (up to 40% of an MLP step measured: docs/performance.md). Bounded: at
//! most `max_blocks` blocks and `max_bytes` bytes are held. Thread-safe.
class HostBlockCache {
 public:
  static constexpr std::size_t min_bytes = std::size_t{64} << 10;
  static constexpr std::size_t max_blocks = 32;
  static constexpr std::size_t max_bytes = std::size_t{256} << 20;

  //! The process's cache; never destroyed, so tensors freed during static
  //! destruction still find it (its blocks stay reachable: not a leak).
  static HostBlockCache& instance() {
    static HostBlockCache* c = new HostBlockCache;
    return *c;
  }
  //! A cached block of exactly `bytes`, or null.
  void* take(std::size_t bytes) noexcept {
    std::lock_guard lk(mu_);
    for (std::size_t i = blocks_.size(); i-- > 0;)
      if (blocks_[i].second == bytes) {
        void* p = blocks_[i].first;
        blocks_[i] = blocks_.back();
        blocks_.pop_back();
        held_ -= bytes;
        return p;
      }
    return nullptr;
  }
  //! Keeps `p` of `bytes` if there is room; false: the caller frees it.
  bool keep(void* p, std::size_t bytes) noexcept {
    std::lock_guard lk(mu_);
    if (blocks_.size() >= max_blocks || held_ + bytes > max_bytes) return false;
    blocks_.emplace_back(p, bytes);  // capacity reserved: never throws
    held_ += bytes;
    return true;
  }

 private:
  HostBlockCache() { blocks_.reserve(max_blocks); }
  std::mutex mu_;
  std::vector<std::pair<void*, std::size_t>> blocks_;
  std::size_t held_ = 0;
};
}  // namespace detail

//! Ordinary host memory, aligned to a 64-byte cache line so that vector
//! loops and per-replica slices start on a line boundary. Large blocks are
//! recycled through a small bounded cache (detail::HostBlockCache).
struct HostSpace {
  using memory_space = HostSpace;
  static constexpr const char* name = "host";
  static constexpr bool host_accessible = true;
  static constexpr std::size_t alignment = 64;

  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    if (bytes >= detail::HostBlockCache::min_bytes)
      if (void* p = detail::HostBlockCache::instance().take(bytes)) return p;
    return ::operator new(bytes, std::align_val_t{alignment});
  }
  static void deallocate(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    if (bytes >= detail::HostBlockCache::min_bytes && detail::HostBlockCache::instance().keep(p, bytes)) return;
    ::operator delete(p, std::align_val_t{alignment});
  }
};

static_assert(MemorySpace<HostSpace>);

}  // namespace strata
