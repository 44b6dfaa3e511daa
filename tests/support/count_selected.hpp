// How many test cases the last doctest run selected (its filters passed): a
// test program's main() fails a run that selected none. A test of a unity
// group (tests/meson.build) runs its group's program with --source-file
// naming its file, and a name that matched nothing would otherwise pass,
// having run nothing.
//   #include "support/count_selected.hpp"   // in the file that defines main(), once
//   return strata_test::run_selected(ctx, argv[0]);   // (mpi_main.cpp: selected_test_cases() after ctx.run())
#pragma once

#include <doctest/doctest.h>

#include <cstdio>

namespace strata_test {

inline unsigned selected_cases = 0;

//! The listener that records it (registered below, in the including file).
struct CountSelected : doctest::IReporter {
  explicit CountSelected(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { selected_cases = s.numTestCasesPassingFilters; }
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

//! Test cases the last run's filters selected.
inline unsigned selected_test_cases() { return selected_cases; }

//! Runs `ctx`; a run that passed but whose filters selected no test case
//! fails, saying so (`prog`: the program's name, for the message).
inline int run_selected(doctest::Context& ctx, const char* prog) {
  const int res = ctx.run();
  if (ctx.shouldExit() || res != 0) return res;
  if (selected_test_cases() == 0) {
    std::fprintf(stderr, "%s: no test case matches the filters: nothing was tested\n", prog);
    return 1;
  }
  return 0;
}

}  // namespace strata_test

DOCTEST_REGISTER_LISTENER("count_selected", 1, strata_test::CountSelected);
