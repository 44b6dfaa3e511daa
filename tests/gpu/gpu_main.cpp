// main() of every GPU test: without a usable GPU (no device, no driver) the
// test exits 77, Meson's "skipped", and says so; it never passes silently.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <strata/cuda/device.hpp>

int main(int argc, char** argv) {
  if (strata::cuda::device_count() == 0) {
    std::puts("skipped: no GPU (strata::cuda::device_count() == 0)");
    return 77;
  }
  std::printf("GPU 0: %s\n", strata::cuda::device_name(0).c_str());
  doctest::Context context(argc, argv);
  return context.run();
}
