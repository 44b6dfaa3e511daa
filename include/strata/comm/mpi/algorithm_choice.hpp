#pragma once
//! AutoReduce's rule for leaving MPI's own all-reduce, apart from MPI: given
//! every candidate's time in each round of interleaved trials, which one to
//! keep. Noise must not be able to pick a slower algorithm, so candidate 0
//! (native: MPI_Iallreduce after the contract) is kept unless another is
//! faster by a margin in its median, in its best time and in most rounds.
//!   const auto v = strata::detail::choose_from_trials(times, /*candidates=*/2);
//! No MPI here: tests/comm/allreduce_choice_test.cpp checks the rule on made-up times.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>

namespace strata::detail {

//! How sure a measurement must be before an alternative replaces native.
//!   strata::detail::ChoiceRule strict{.margin = 0.25};
struct ChoiceRule {
  //! The alternative's median and its best time must each be faster than
  //! native's by this fraction at least: native / alternative >= 1 + margin.
  //! Noise on a busy 2-core machine moved single trials by 10-20%; a median
  //! of interleaved rounds moves far less, and needs to move by this much.
  double margin = 0.15;
  //! ...and it must beat native's time of the same round (a round's trials
  //! run back to back, so a burst of load slows both) in at least this
  //! fraction of the rounds: 2 of 3, 4 of 5, 22 of 32.
  double round_wins = 2.0 / 3.0;
  //! With fewer rounds than this nothing can tell noise from a win: native.
  std::size_t min_rounds = 3;
};

//! Candidates a size class may try: native, ring, direct.
inline constexpr std::size_t max_trial_candidates = 3;

//! What the rule decided, and from what (seconds).
struct TrialVerdict {
  std::size_t pick = 0;                                     //!< the candidate kept (0: native)
  std::size_t rounds = 0;                                   //!< complete rounds of trials
  std::array<double, max_trial_candidates> median{};        //!< per candidate
  std::array<double, max_trial_candidates> best{};          //!< per candidate
  std::array<std::size_t, max_trial_candidates> wins{};     //!< rounds it beat native in (native: 0)
  std::size_t wins_needed = 0;                              //!< rounds an alternative had to win
};

namespace choice_detail {
inline double median_of(std::array<double, 64>& v, std::size_t n) {
  std::sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace choice_detail

//! `times[r * candidates + c]`: candidate c's time in round r, the layout of
//! trials interleaved as they ran (native, ring, direct, native, ...);
//! candidate 0 is native. Picks native unless an alternative has (a) a median
//! and (b) a best time both at least `margin` faster than native's and (c)
//! beat native in `round_wins` of the rounds; of several such, the lowest
//! median (ties: the earlier candidate). Native too when there are fewer
//! than `min_rounds` rounds (at most 64 are read), more than
//! max_trial_candidates candidates, or any time that is not a positive
//! finite number: in doubt, MPI's own algorithm. A pure function of its
//! inputs: ranks that agree on the times agree on the pick.
inline TrialVerdict choose_from_trials(std::span<const double> times, std::size_t candidates, ChoiceRule rule = {}) {
  TrialVerdict v;
  if (candidates == 0 || candidates > max_trial_candidates) return v;
  v.rounds = std::min<std::size_t>(times.size() / candidates, 64);
  const std::size_t n = v.rounds;
  const auto t = [&](std::size_t r, std::size_t c) { return times[r * candidates + c]; };
  bool sane = n > 0;
  for (std::size_t i = 0; i < n * candidates; ++i) sane = sane && std::isfinite(times[i]) && times[i] > 0;
  if (!sane) return v;
  std::array<double, 64> scratch{};
  for (std::size_t c = 0; c < candidates; ++c) {
    for (std::size_t r = 0; r < n; ++r) {
      scratch[r] = t(r, c);
      if (c > 0 && t(r, c) < t(r, 0)) ++v.wins[c];
    }
    v.best[c] = *std::min_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n));
    v.median[c] = choice_detail::median_of(scratch, n);
  }
  const double needed = std::ceil(rule.round_wins * static_cast<double>(n) - 1e-9);
  v.wins_needed = std::max<std::size_t>(1, static_cast<std::size_t>(needed));
  if (n < rule.min_rounds) return v;
  const double factor = 1.0 + rule.margin;
  for (std::size_t c = 1; c < candidates; ++c) {
    const bool clear = v.median[c] * factor <= v.median[0] && v.best[c] * factor <= v.best[0] &&
                       v.wins[c] >= v.wins_needed;
    if (clear && (v.pick == 0 || v.median[c] < v.median[v.pick])) v.pick = c;
  }
  return v;
}

}  // namespace strata::detail
