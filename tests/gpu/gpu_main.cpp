// main() of every GPU test: without a usable GPU (no device, no driver) the
// test exits 77, Meson's "skipped", and says so; it never passes silently.
// A case that skipped itself (skip.hpp: two GPUs on a machine with one)
// makes the run exit 77 too, printing why.
// A run whose filters select no test case fails (count_selected.hpp: a
// test of the unity group names its file with --source-file).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <strata/cuda/device.hpp>

#include "support/count_selected.hpp"
#include "skip.hpp"

int main(int argc, char** argv) {
  if (strata::cuda::device_count() == 0) {
    std::puts("skipped: no GPU (strata::cuda::device_count() == 0)");
    return 77;
  }
  std::printf("GPU 0: %s\n", strata::cuda::device_name(0).c_str());
  doctest::Context context(argc, argv);
  const int res = strata_test::run_selected(context, argc > 0 ? argv[0] : "test");
  return res == 0 && !context.shouldExit() ? gpu_test::skip_status(res) : res;
}
