// main() of the unit tests: doctest's own, except that a run whose filters
// select no test case fails (count_selected.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "support/count_selected.hpp"

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  return strata_test::run_selected(ctx, argc > 0 ? argv[0] : "test");
}
