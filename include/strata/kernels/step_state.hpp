#pragma once
//! What a capturable training step reads and writes in its compute's
//! memory instead of taking from the host each step (a CUDA graph replays
//! the pointers and values it captured, so whatever varies from step to
//! step must be read where the replay finds it): the optimizer's iteration
//! (which keys dropout masks), the step size of each iteration, and the
//! finiteness gate of the update. execution/device_executor.hpp's captured
//! steps use them; the host's compute runs the same ops in its loops.
//!   StepCounters* c = ...;  RateTable* t = ...;            // in the compute's memory
//!   compute.adam_at(w, g, m, v, n, s, {c, t, true});       // rate t->rate[c->iteration - t->base]
//!   compute.end_step(c, true);                             // iteration + 1, or a skip counted
//! Bitwise: an op reading its scalar here gives the bits of the same op
//! given that scalar by value (kernels/bodies/).

#include <cstddef>
#include <cstdint>
#include <memory>

#include <strata/core/host_device.hpp>

namespace strata::kernels {

//! A step's counters, advanced by Compute::end_step at the step's end.
struct StepCounters {
  std::uint64_t iteration = 0;  //!< the optimizer's step (updates applied before this step)
  std::uint64_t skipped = 0;    //!< steps whose gradient held a NaN or infinity (their update skipped)
  std::uint64_t in_a_row = 0;   //!< the current run of consecutive skipped steps
  double bad = 0;               //!< this step's non-finite gradient values (count_nonfinite adds here)
};

//! The optimizer's step size for iterations base, base + 1, ... (Adam's
//! with its bias correction folded in, SGD's rate), written by the host
//! once per read interval.
struct RateTable {
  static constexpr std::size_t capacity = 1024;
  std::uint64_t base = 0;
  std::uint64_t count = 0;  //!< entries filled, 1..capacity
  float rate[capacity] = {};
};

//! The entry for `it` (the last one past the filled entries).
STRATA_HD inline float rate_at(const RateTable& t, std::uint64_t it) {
  std::uint64_t k = it >= t.base ? it - t.base : 0;
  if (k >= t.count) k = t.count ? t.count - 1 : 0;
  return t.rate[k];
}

//! Where an update inside a capturable step reads its scalars.
struct DeviceStep {
  const StepCounters* counters = nullptr;
  const RateTable* rates = nullptr;
  bool gated = false;  //!< skip the update when counters->bad > 0 (the finiteness check)
};

//! Whether the update runs: not gated, or no non-finite value counted.
STRATA_HD inline bool update_runs(const DeviceStep& d) { return !d.gated || !(d.counters->bad > 0); }

//! The step's end: a gated step with non-finite values is counted as
//! skipped (the iteration stays), any other advances the iteration; the
//! count of non-finite values starts again at 0.
STRATA_HD inline void end_step_body(StepCounters& c, bool gated) {
  if (gated && c.bad > 0) {
    ++c.skipped;
    ++c.in_a_row;
  } else {
    ++c.iteration;
    c.in_a_row = 0;
  }
  c.bad = 0;
}

//! A step's work captured once (Compute::end_step_capture) and replayed:
//! a CUDA graph on a GPU, the recorded calls on the host.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  //! Runs the captured work once more (on a GPU: enqueued, returns at once).
  virtual void launch() = 0;
};

}  // namespace strata::kernels
