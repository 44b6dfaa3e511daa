// AutoReduce's measured choice over MPI, its rule alone (no MPI): given each
// candidate's times in interleaved rounds, native (MPI's own all-reduce) is
// kept unless an alternative wins by a margin noise cannot produce.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <strata/comm/mpi/algorithm_choice.hpp>

namespace allreduce_choice_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using strata::detail::choose_from_trials;

namespace {

// Interleaves per-candidate series into the layout the selector records:
// round by round, native first.
std::vector<double> interleave(const std::vector<std::vector<double>>& per_candidate) {
  std::vector<double> out;
  for (std::size_t r = 0; r < per_candidate[0].size(); ++r)
    for (const auto& c : per_candidate) out.push_back(c[r]);
  return out;
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

TEST_CASE("noise that flipped the old rule (best time 5% below native's) keeps native") {
  const std::vector<double> native{100, 102, 98, 101, 99}, ring{96, 110, 92, 105, 104};
  // the old rule compared best times with a 5% margin: it would have taken the ring
  REQUIRE(min_of(ring) < 0.95 * min_of(native));
  const auto v = choose_from_trials(interleave({native, ring}), 2);
  CHECK(v.pick == 0);
  CHECK(v.rounds == 5);
  CHECK(v.median[0] == 100);
  CHECK(v.median[1] == 104);
  CHECK(v.wins[1] == 2);  // the ring was faster in 2 rounds of 5: a coin, not a win
  CHECK(v.wins_needed == 4);
}

TEST_CASE("a consistent large win switches; of two winners the lower median") {
  const std::vector<double> native{200, 210, 190, 205, 199}, ring{120, 125, 118, 130, 122},
      direct{150, 151, 149, 150, 152};
  const auto two = choose_from_trials(interleave({native, ring}), 2);
  CHECK(two.pick == 1);
  CHECK(two.wins[1] == 5);
  CHECK(two.median[1] == 122);
  const auto three = choose_from_trials(interleave({native, direct, ring}), 3);
  CHECK(three.pick == 2);  // both clear the margin; the ring's median is lower
  CHECK(choose_from_trials(interleave({native, ring, direct}), 3).pick == 1);
}

TEST_CASE("ties, and wins below the margin, keep native") {
  const std::vector<double> same{100, 100, 100, 100, 100};
  CHECK(choose_from_trials(interleave({same, same, same}), 3).pick == 0);
  // 10% faster in every round: real, but within what noise can do; native stays
  const std::vector<double> native{110, 110, 110}, ten{100, 100, 100};
  const auto v = choose_from_trials(interleave({native, ten}), 2);
  CHECK(v.wins[1] == 3);
  CHECK(v.pick == 0);
  // just below the 15% margin stays, just above switches
  const std::vector<double> base{100, 100, 100};
  CHECK(choose_from_trials(interleave({{114, 114, 114}, base}), 2).pick == 0);
  CHECK(choose_from_trials(interleave({{116, 116, 116}, base}), 2).pick == 1);
  // two alternatives tied below native: the earlier one
  CHECK(choose_from_trials(interleave({{116, 116, 116}, base, base}), 3).pick == 1);
}

TEST_CASE("a single outlier does not switch") {
  const std::vector<double> native{100, 100, 100, 100, 100};
  // one lucky trial of the ring, twice as fast: its best time clears the margin, its median does not
  CHECK(choose_from_trials(interleave({native, {100, 50, 101, 99, 100}}), 2).pick == 0);
  // one round where native was descheduled (10x): the ring wins that round and is equal in the others
  CHECK(choose_from_trials(interleave({{100, 1000, 100, 100, 100}, {100, 100, 100, 100, 100}}), 2).pick == 0);
  // native slow in one round and the ring lucky in another: still only 2 rounds of 5
  CHECK(choose_from_trials(interleave({{100, 1000, 100, 100, 100}, {40, 100, 100, 100, 100}}), 2).pick == 0);
  // a median that is 15% better but a best time that is not (native's best shows it is as fast): native
  CHECK(choose_from_trials(interleave({{120, 121, 122, 80, 123}, {100, 100, 100, 100, 100}}), 2).pick == 0);
}

TEST_CASE("one outlier does not hide a real win either") {
  // the ring 40% faster in 4 rounds of 5, descheduled once
  const std::vector<double> native{200, 200, 200, 200, 200}, ring{120, 120, 900, 120, 120};
  const auto v = choose_from_trials(interleave({native, ring}), 2);
  CHECK(v.wins[1] == 4);
  CHECK(v.pick == 1);
  // ...but with 3 rounds a lost round leaves 2 of 3: still enough
  CHECK(choose_from_trials(interleave({{200, 200, 200}, {120, 900, 120}}), 2).pick == 1);
  // and two lost rounds of 3 are not
  CHECK(choose_from_trials(interleave({{200, 200, 200}, {120, 900, 900}}), 2).pick == 0);
}

TEST_CASE("in doubt, native: too few rounds, bad times, bad shapes") {
  // a huge win measured in 2 rounds: too few to tell noise from a win
  CHECK(choose_from_trials(interleave({{200, 200}, {100, 100}}), 2).pick == 0);
  CHECK(choose_from_trials(interleave({{200, 200}, {100, 100}}), 2, {.min_rounds = 2}).pick == 1);
  CHECK(choose_from_trials({}, 2).pick == 0);
  CHECK(choose_from_trials(std::vector<double>{1.0, 0.5, 1.0, 0.5, 1.0, 0.5}, 0).pick == 0);
  CHECK(choose_from_trials(std::vector<double>(12, 1.0), 4).pick == 0);  // more candidates than there are
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(choose_from_trials(interleave({{200, 200, 200}, {100, nan, 100}}), 2).pick == 0);
  CHECK(choose_from_trials(interleave({{200, inf, 200}, {100, 100, 100}}), 2).pick == 0);
  CHECK(choose_from_trials(interleave({{200, 200, 200}, {100, 0, 100}}), 2).pick == 0);
  // a trailing incomplete round is ignored
  std::vector<double> t = interleave({{200, 200, 200}, {100, 100, 100}});
  t.push_back(1e-9);
  const auto v = choose_from_trials(t, 2);
  CHECK(v.rounds == 3);
  CHECK(v.pick == 1);
  // an even count of rounds: the median is the mean of the middle two
  CHECK(choose_from_trials(interleave({{4, 1, 3, 2}, {4, 4, 4, 4}}), 2).median[0] == 2.5);
}

TEST_CASE("a stricter rule asks for more") {
  const std::vector<double> native{130, 130, 130}, ring{100, 100, 100};
  CHECK(choose_from_trials(interleave({native, ring}), 2).pick == 1);
  CHECK(choose_from_trials(interleave({native, ring}), 2, {.margin = 0.5}).pick == 0);
}

}  // namespace allreduce_choice_test
