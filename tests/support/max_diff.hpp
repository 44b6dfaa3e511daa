#pragma once
// The largest elementwise difference of two weight vectors, as the tests that
// compare a split or sharded run with one replica's within rounding use it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include <doctest/doctest.h>

namespace strata_test {

//! The largest |a[i] - b[i]|; the test fails at once where the sizes differ.
inline float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace strata_test
