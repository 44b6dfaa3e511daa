#pragma once
//! An epoch's running totals as a checkpoint keeps them (the
//! "epoch_totals" entry BackupAndRestore writes, nn/fit/fit_backup.hpp): every
//! worker's loss, rows, samples and metric sums when the checkpoint was
//! taken, exact, so that a resumed epoch's sums go on from them and its logs
//! are the uninterrupted run's to the bit.
//!   const std::string text = detail::gather_epoch_totals(strategy, &running);   // every worker
//!   PassTotals mine = detail::epoch_totals_of(strategy, text, path, false);

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/fit/fit_callbacks.hpp>
#include <strata/nn/callbacks/monitor.hpp>
#include <strata/strategy/any_strategy.hpp>
#include <strata/execution/pass.hpp>

namespace strata::nn::detail {

//! Collective: every worker's running totals of the epoch (`running`: this
//! worker's; null: none, as at an epoch's end), as "W K" then W blocks of K
//! values (loss, rows, samples, the metrics), each exact ("" when none).
inline std::string gather_epoch_totals(AnyStrategy& s, const PassTotals* running) {
  if (!running) return {};
  const std::size_t W = static_cast<std::size_t>(std::max(1, s.num_workers()));
  const std::size_t K = 3 + running->metrics.size();
  std::vector<double> all(W * K, 0.0);
  const std::size_t w = static_cast<std::size_t>(s.worker_index());
  all[w * K] = running->loss;
  all[w * K + 1] = static_cast<double>(running->local);
  all[w * K + 2] = static_cast<double>(running->samples);
  std::copy(running->metrics.begin(), running->metrics.end(), all.begin() + static_cast<std::ptrdiff_t>(w * K + 3));
  all = sum_over_workers(s, std::move(all));  // (one nonzero term per value: exact)
  std::string out = std::to_string(W) + " " + std::to_string(K);
  for (const double v : all) {
    out += ' ';
    out += exact(v);
  }
  return out;
}

//! This worker's totals from `text` (gather_epoch_totals'), read from
//! checkpoint `path` (for errors); `all`: every worker's summed, in worker
//! order. Saved by another number of workers: worker 0 takes their sum (the
//! epoch's totals, summed over the workers at its end, come out the same),
//! the others none. A text that does not parse is an Error naming the file.
inline PassTotals epoch_totals_of(AnyStrategy& s, const std::string& text, const std::filesystem::path& path,
                                  bool all) {
  std::vector<double> v;
  const char* at = text.c_str();
  for (char* end = nullptr;; at = end) {
    const double x = std::strtod(at, &end);
    if (end == at) break;
    v.push_back(x);
  }
  const auto corrupt = [&] {
    return Error("BackupAndRestore: " + path.string() + " is corrupt: its epoch_totals do not parse");
  };
  // a count: a whole number from 0 up to `most` (else the file is corrupt)
  const auto count = [&](double x, double most) {
    if (!(x >= 0 && x <= most && x == std::floor(x))) throw corrupt();
    return static_cast<std::size_t>(x);
  };
  if (v.size() < 2) throw corrupt();
  const std::size_t W = count(v[0], static_cast<double>(v.size())), K = count(v[1], static_cast<double>(v.size()));
  if (W == 0 || K < 3 || v.size() != 2 + W * K) throw corrupt();
  const double* blocks = v.data() + 2;
  constexpr double most_rows = 9.0e15;  // below 2^53: a double counts rows exactly
  PassTotals t;
  t.metrics.assign(K - 3, 0.0);
  t.samples = count(blocks[2], most_rows);  // global samples: the same on every worker
  const auto w = static_cast<std::size_t>(s.worker_index());
  if (!all && W == static_cast<std::size_t>(std::max(1, s.num_workers()))) {
    t.loss = blocks[w * K];
    t.local = count(blocks[w * K + 1], most_rows);
    std::copy(blocks + w * K + 3, blocks + (w + 1) * K, t.metrics.begin());
  } else if (all || w == 0) {
    for (std::size_t q = 0; q < W; ++q) {
      t.loss += blocks[q * K];
      t.local += count(blocks[q * K + 1], most_rows);
      for (std::size_t m = 0; m + 3 < K; ++m) t.metrics[m] += blocks[q * K + 3 + m];
    }
  }
  return t;
}

}  // namespace strata::nn::detail
