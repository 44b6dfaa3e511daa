#pragma once
// A test case that cannot run on this machine (two GPUs on a machine with
// one) says so and ends as skipped: never a pass. doctest has no runtime
// skip, so the case records why and returns; the test's main() (gpu_main.cpp,
// mpi_gpu_main.hpp) then exits 77, Meson's SKIP, printing each reason. The
// cases that need two GPUs carry "(two GPUs)" in their names, and
// tests/gpu/meson.build runs them as their own tests (gpu_*_two_gpus), so a
// skip there never hides the passes of the one-GPU cases.
//   TEST_CASE("... (two GPUs)") { STRATA_GPU_SKIP_UNLESS(strata::cuda::device_count() >= 2, "needs 2 GPUs"); ... }
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace gpu_test {

//! The reasons of the cases skipped in this run, in order.
inline std::vector<std::string>& skipped() {
  static std::vector<std::string> s;
  return s;
}

//! Records that the current test case is skipped, and why (the caller returns).
inline void skip(const std::string& why) {
  skipped().push_back(why);
  MESSAGE("SKIPPED: " << why);
}

//! After a run that passed: 77 (skipped) with every reason printed when a
//! case was skipped, else `passed`.
inline int skip_status(int passed) {
  if (skipped().empty()) return passed;
  for (const std::string& why : skipped()) std::printf("SKIPPED: %s\n", why.c_str());
  return 77;
}

}  // namespace gpu_test

//! Ends the current test case as skipped, naming `why`, unless `cond` holds.
#define STRATA_GPU_SKIP_UNLESS(cond, why)  \
  do {                                     \
    if (!(cond)) {                         \
      ::gpu_test::skip(why);               \
      return;                              \
    }                                      \
  } while (false)
