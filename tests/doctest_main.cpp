// main() of the unit tests: doctest's own, except that a run whose filters
// pick no test case fails. A test of a unity group (tests/meson.build) runs
// its group's program with --source-file naming its file: a name that
// matched nothing would otherwise pass, having run nothing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

unsigned selected = 0;  // test cases that passed the filters, from the last run

//! A listener that records how many test cases the filters selected.
struct CountSelected : doctest::IReporter {
  explicit CountSelected(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { selected = s.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("count_selected", 1, CountSelected);

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int res = ctx.run();
  if (ctx.shouldExit() || res != 0) return res;
  if (selected == 0) {
    std::fprintf(stderr, "%s: no test case matches the filters: nothing was tested\n", argc > 0 ? argv[0] : "test");
    return 1;
  }
  return 0;
}
