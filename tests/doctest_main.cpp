// main() of the unit tests: doctest's own, except that a run whose filters
// select no test case fails (count_selected.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "count_selected.hpp"

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int res = ctx.run();
  if (ctx.shouldExit() || res != 0) return res;
  if (strata_test::selected_test_cases() == 0) {
    std::fprintf(stderr, "%s: no test case matches the filters: nothing was tested\n", argc > 0 ? argv[0] : "test");
    return 1;
  }
  return 0;
}
