#pragma once
// What the device team's tests share (tests/device/device_team_test.cpp on stand-in
// GPUs, tests/gpu/device_comm_test.cpp on a GPU): each replica's input
// values, the first replica error rethrown, and a bitwise comparison that
// names the first element that differs.
//   const auto in = strata_test::replica_values<float>(1001, 7, /*product=*/false);
//   strata_test::rethrow_first(run_team(team, body));
//   strata_test::require_bitwise(got, want, "float32 sum p=4 replica 1");
#include <doctest/doctest.h>

#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace strata_test {

//! n values of T from `seed`: in [-4, 4) (floats) or [-1000, 1000] (integers); near 1 for a product's inputs.
template <class T>
std::vector<T> replica_values(std::size_t n, unsigned seed, bool product) {
  std::mt19937 gen(seed);
  std::vector<T> v(n);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<T> u(product ? T(0.5) : T(-4), product ? T(1.5) : T(4));
    for (auto& x : v) x = u(gen);
  } else {
    std::uniform_int_distribution<int> u(product ? -2 : -1000, product ? 2 : 1000);
    for (auto& x : v) x = static_cast<T>(u(gen));
  }
  return v;
}

//! The first replica's error, if any replica failed.
inline void rethrow_first(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

template <class T>
void require_bitwise(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      FAIL(what << ": element " << i << " is " << got[i] << ", expected bitwise " << want[i]);
}

}  // namespace strata_test
