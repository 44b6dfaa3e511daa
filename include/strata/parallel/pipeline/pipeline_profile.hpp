#pragma once
//! Balance::Measured's measurement (pipeline_options.hpp): each layer of a
//! model run alone, forward and backward, on one micro-batch of a batch,
//! its parameter gradient going to scratch (nothing trains).
//!   const auto seconds = strata::detail::measure_layers(program, value.span(), counts, batch, rows, global, it, 3);

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <strata/core/partition.hpp>
#include <strata/execution/program.hpp>

namespace strata::detail {

//! Each layer's seconds (layer l has counts[l] of the parameters `value`)
//! over `steps` runs of the rows `rows` of `b` (a batch of `global` rows,
//! at optimizer iteration `it`): its forward, the loss for the last layer,
//! its backward.
inline std::vector<double> measure_layers(ModelProgram& program, std::span<float> value,
                                          const std::vector<std::size_t>& counts, const Batch& b, Range rows,
                                          std::size_t global, std::int64_t it, std::size_t steps) {
  using clock = std::chrono::steady_clock;
  const std::size_t L = counts.size();
  std::vector<float> scratch(value.size());
  std::vector<std::unique_ptr<StageProgram>> one;
  for (std::size_t l = 0, off = 0; l < L; off += counts[l++]) {
    one.push_back(program.make_stage(Range{l, l + 1}, value.subspan(off, counts[l]),
                                     std::span<float>(scratch).subspan(off, counts[l])));
    one.back()->set_slots(1);
  }
  const StageStep info{Phase::Train, 0, static_cast<std::uint64_t>(it), 1.f / static_cast<float>(global)};
  std::vector<double> t(L, 0.0);
  const auto timed = [&](std::size_t l, auto&& fn) {
    const auto t0 = clock::now();
    fn();
    t[l] += std::chrono::duration<double>(clock::now() - t0).count();
  };
  for (std::size_t p = 0; p < steps; ++p) {
    const float* in = b.x->data() + rows.begin * program.input_width();
    for (std::size_t l = 0; l < L; ++l)
      timed(l, [&] { in = one[l]->forward(0, in, rows.size(), info).data(); });
    ReplicaResult r;
    timed(L - 1, [&] { one[L - 1]->loss(0, *b.y, rows, info, r); });
    const float* dout = nullptr;
    for (std::size_t l = L; l-- > 0 && one[l]->has_backward();)
      timed(l, [&] { dout = one[l]->backward(0, dout, true, nullptr).data(); });
  }
  return t;
}

//! The per-layer costs balance_stages splits by, from measure_layers' seconds
//! `t` over `steps` runs: nanoseconds, at least 1 (a layer is never free);
//! `per_step` gets each layer's seconds per run.
inline std::vector<std::size_t> measured_costs(const std::vector<double>& t, std::size_t steps,
                                               std::vector<double>& per_step) {
  per_step.clear();
  std::vector<std::size_t> cost;
  for (double sec : t) {
    per_step.push_back(sec / static_cast<double>(steps));
    cost.push_back(static_cast<std::size_t>(sec * 1e9) + 1);
  }
  return cost;
}

}  // namespace strata::detail
