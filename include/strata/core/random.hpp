#pragma once
//! Seeded random numbers that do not depend on thread scheduling: a
//! counter-based generator (SplitMix64 over a key and a counter), so a
//! stream is a pure function of its key, e.g. (seed, replica, step). It lives
//! in core/ because both data/ (the shuffle) and nn/ (initializers, dropout)
//! draw from it, and data/ must not include nn/.
//!   strata::Rng rng{strata::detail::mix(seed, replica, step)};
//!   float u = rng.uniform();   // [0, 1)
//! Deterministic: the same key gives the same draws on every platform.

#include <cstdint>

#include <strata/core/host_device.hpp>  // STRATA_HD: the Rng runs in kernels too

namespace strata {

namespace detail {
//! SplitMix64's finalizer over x + golden ratio: a bijective 64-bit hash.
//!   std::uint64_t h = strata::detail::splitmix(42);
STRATA_HD constexpr std::uint64_t splitmix(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
//! Combines words into one well-mixed key (order matters: mix(a, b) != mix(b, a)).
//!   const auto key = strata::detail::mix(seed, pass);
STRATA_HD constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept { return splitmix(a ^ splitmix(b)); }
template <class... R>
STRATA_HD constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b, R... rest) noexcept {
  return mix(mix(a, b), rest...);
}
}  // namespace detail

//! A small deterministic generator: the i-th draw is splitmix(key + i * odd constant).
//!   strata::Rng rng{7};
//!   auto k = rng.below(10);   // [0, 10)
class Rng {
 public:
  explicit constexpr Rng(std::uint64_t key) noexcept : key_(key) {}
  constexpr std::uint64_t next() noexcept { return draw(key_, ++n_); }
  //! Uniform in [0, 1) with 24 random bits (exact in float).
  constexpr float uniform() noexcept { return to_uniform(next()); }
  //! The draw after `count` of them (count >= 1) of Rng{key}, without the
  //! ones before: what a kernel's thread for element i uses (count i + 1).
  //!   float u = strata::Rng::to_uniform(strata::Rng::draw(key, i + 1));   // == the (i+1)-th rng.uniform()
  STRATA_HD static constexpr std::uint64_t draw(std::uint64_t key, std::uint64_t count) noexcept {
    return detail::splitmix(key + 0x632BE59BD9B4E019ull * count);
  }
  STRATA_HD static constexpr float to_uniform(std::uint64_t draw) noexcept {
    return static_cast<float>(draw >> 40) * 0x1.0p-24f;
  }
  //! Uniform integer in [0, n) for 0 < n <= 2^32 (multiply-shift on 32 random bits).
  constexpr std::uint64_t below(std::uint64_t n) noexcept { return ((next() >> 32) * n) >> 32; }

 private:
  std::uint64_t key_;
  std::uint64_t n_ = 0;
};

// Pinned values: a change here would silently change every shuffle and
// every initialization, so it must fail the build instead.
static_assert(detail::splitmix(0) == 0xE220A8397B1DCDAFull);
static_assert(detail::mix(42, 3, 5) == 0x3620F811FD07A836ull);
static_assert([] {
  Rng r{detail::mix(42, 3, 5)};
  const auto a = r.next();
  return a == 0x9A4BD59945232D9Dull && r.next() == 0x1042CD276572FE6Eull;
}());
static_assert(Rng::draw(detail::mix(42, 3, 5), 2) == 0x1042CD276572FE6Eull);  // a kernel's draw for element 1

}  // namespace strata
