#pragma once
//! What a PipelineStrategy is told (before a model is made in its scope)
//! and what it measures, and how a model's layers are split into stages.
//!   strata::PipelineStrategy s{strata::cpu_replicas(2)};
//!   s.pipeline_options() = {.stages = {{0, 3}, {3, 7}}, .micro_batches = 4, .schedule = strata::Schedule::OneFOneB};
//! docs/model-parallelism.md explains the choices.

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>

namespace strata {

//! The order in which a stage runs the forwards and backwards of a batch's micro-batches.
enum class Schedule {
  Naive,     //!< each micro-batch forward through every stage, then backward, then the next: one stage busy at a time
  GPipe,     //!< every micro-batch forward, then every backward; a stage keeps all M micro-batches' activations
  OneFOneB,  //!< PipeDream-flush: after S - 1 - s warm-up forwards, stage s alternates one forward, one backward
};

[[nodiscard]] constexpr std::string_view to_string(Schedule s) noexcept {
  switch (s) {
    case Schedule::Naive: return "naive";
    case Schedule::GPipe: return "gpipe";
    case Schedule::OneFOneB: return "1f1b";
  }
  return "?";
}

//! What an automatic split balances.
enum class Balance {
  Parameters,  //!< the stages' parameter counts
  Measured,    //!< each layer's compute time, measured on the first training batch (profile_steps runs)
};

//! How a PipelineStrategy splits and runs a model.
struct PipelineOptions {
  //! Layer ranges [begin, end), one per replica, in order, covering every
  //! layer once (layers without parameters count). Empty: chosen to balance
  //! the stages' parameter counts.
  std::vector<Range> stages;
  //! Each batch is cut into this many micro-batches of balanced, contiguous
  //! rows (fewer when the batch has fewer rows); their gradients are summed
  //! into one update per batch.
  std::size_t micro_batches = 1;
  Schedule schedule = Schedule::OneFOneB;
  //! Bytes one stage may hold (its parameters, their gradient and the
  //! micro-batch gradient, the optimizer state, the activations of its
  //! micro-batches in flight); 0: no limit. Checked before a batch runs.
  std::size_t memory_budget_bytes = 0;
  //! With no `stages`: balance parameters (known at once) or measured time.
  //! Measured: the model is split by parameters until the first training
  //! batch, whose first micro-batch then runs forward and backward through
  //! each layer alone `profile_steps` times (gradients to scratch: the
  //! weights do not change), and the layers are split again by their mean
  //! times (PipelineStats::layer_seconds).
  Balance balance = Balance::Parameters;
  std::size_t profile_steps = 3;
  //! Data x pipeline: D copies of the S-stage pipeline over D x S replicas
  //! (replica d * S + s runs stage s of copy d). Each batch's rows are split
  //! into D contiguous, balanced shares, one per copy, each cut into
  //! micro-batches; after the backward, each stage's gradients are summed
  //! over its D copies (in copy order) and the update applied once: the
  //! step of data parallelism over D replicas. 1: one pipeline.
  std::size_t data_parallel = 1;
  //! Tensor x pipeline: each stage split over T replicas by tensor
  //! parallelism (parallel/tensor/tensor_parallel_executor.hpp says how a model
  //! splits), D x S x T replicas in all (replica (d * S + s) * T + t is
  //! member t of stage s of copy d). A stage's members run its layers'
  //! shards on the same micro-batches and sum their split layers' partial
  //! results among themselves; member t of stage s sends its activations to
  //! member t of stage s + 1 (every member holds the whole activation). A
  //! Dense pair a stage boundary cuts stays whole. 1: whole stages.
  std::size_t tensor_parallel = 1;
  friend bool operator==(const PipelineOptions&, const PipelineOptions&) = default;
};

//! What a pipeline measured, per stage, over the training steps since reset.
struct PipelineStats {
  struct Stage {
    Range layers;
    std::size_t params = 0;
    double busy_s = 0;   //!< computing (forward, loss, backward, update)
    double wall_s = 0;   //!< from each step's start to the stage's end of it
    std::size_t peak_activation_bytes = 0;   //!< most bytes of activations held by micro-batches in flight
    std::size_t bound_activation_bytes = 0;  //!< what the schedule allows (in flight x the largest micro-batch)
    [[nodiscard]] double idle_fraction() const { return wall_s > 0 ? 1.0 - busy_s / wall_s : 0.0; }
  };
  std::vector<Stage> stages;
  std::size_t steps = 0;
  std::vector<double> layer_seconds;  //!< Balance::Measured: each layer's measured forward + backward time
  void reset() {
    for (Stage& s : stages) s.busy_s = s.wall_s = 0, s.peak_activation_bytes = 0;
    steps = 0;
  }
};

//! Micro-batches stage `s` of `S` keeps in flight under `k` with `m` micro-batches.
[[nodiscard]] constexpr std::size_t in_flight(Schedule k, std::size_t s, std::size_t S, std::size_t m) noexcept {
  switch (k) {
    case Schedule::Naive: return 1;
    case Schedule::GPipe: return m;
    case Schedule::OneFOneB: return std::min(m, S - s);
  }
  return m;
}

namespace detail {

inline std::string range_str(Range r) {  // appended: GCC 12 -O3 warns falsely on "[" + std::to_string (-Wrestrict)
  std::string s = "[";
  s += std::to_string(r.begin);
  s += ", ";
  s += std::to_string(r.end);
  s += ")";
  return s;
}

//! Checks hand-given stages against `layers` layers and `S` replicas.
inline void check_stages(const std::vector<Range>& st, std::size_t layers, std::size_t S,
                         const std::vector<char>& cuts = {}) {
  if (st.size() != S)
    throw Error("pipeline: " + std::to_string(st.size()) + " stages given for " + std::to_string(S) +
                " replicas; give one layer range per replica (or none, to split automatically)");
  std::size_t next = 0;
  for (std::size_t s = 0; s < st.size(); ++s) {
    const Range r = st[s];
    if (r.begin >= r.end)
      throw Error("pipeline: stage " + std::to_string(s) + " has the empty layer range " + range_str(r) +
                  "; every stage needs at least one layer");
    if (r.begin != next)
      throw Error("pipeline: stage " + std::to_string(s) + " starts at layer " + std::to_string(r.begin) +
                  " but the previous stages end at " + std::to_string(next) + " (ranges " +
                  (r.begin < next ? "overlap" : "leave a gap") + "); stages are consecutive and cover every layer once");
    if (s && !cuts.empty() && !cuts[r.begin])
      throw Error("pipeline: stage " + std::to_string(s) + " starts at layer " + std::to_string(r.begin) +
                  ", inside a block of the model's graph (a later layer takes an output from before layer " +
                  std::to_string(r.begin - 1) + "): a stage may start only where one activation alone crosses");
    next = r.end;
  }
  if (next != layers)
    throw Error("pipeline: the stages cover layers [0, " + std::to_string(next) + ") of a model of " +
                std::to_string(layers) + " layers; they must cover all of them");
}

//! Splits layers with costs `cost` into `S` consecutive non-empty stages,
//! minimizing the largest stage's cost (ties: the largest layer count);
//! a stage starts only at a layer k with cuts[k] set (empty: anywhere).
inline std::vector<Range> balance_stages(const std::vector<std::size_t>& cost, std::size_t S,
                                         const std::vector<char>& cuts = {}) {
  const std::size_t L = cost.size();
  if (S == 0) throw Error("pipeline: no stages (a pipeline needs at least one replica)");
  if (S > L)
    throw Error("pipeline: " + std::to_string(S) + " stages for a model of " + std::to_string(L) +
                " layers; every stage needs at least one layer: use at most " + std::to_string(L) + " replicas");
  std::vector<std::size_t> pre(L + 1, 0);
  for (std::size_t l = 0; l < L; ++l) pre[l + 1] = pre[l] + cost[l];
  using Key = std::pair<std::size_t, std::size_t>;  // (max cost, max layers)
  constexpr std::size_t inf = std::numeric_limits<std::size_t>::max();
  // best[s][l]: the first l layers in s stages; cut[s][l]: where the last stage starts
  std::vector<std::vector<Key>> best(S + 1, std::vector<Key>(L + 1, {inf, inf}));
  std::vector<std::vector<std::size_t>> cut(S + 1, std::vector<std::size_t>(L + 1, 0));
  best[0][0] = {0, 0};
  for (std::size_t s = 1; s <= S; ++s)
    for (std::size_t l = s; l <= L; ++l)
      for (std::size_t k = s - 1; k < l; ++k) {
        if (best[s - 1][k].first == inf || (k && !cuts.empty() && !cuts[k])) continue;
        const Key c{std::max(best[s - 1][k].first, pre[l] - pre[k]), std::max(best[s - 1][k].second, l - k)};
        if (c < best[s][l]) best[s][l] = c, cut[s][l] = k;
      }
  if (best[S][L].first == inf) {
    std::size_t most = 1;
    for (std::size_t k = 1; k < L; ++k) most += cuts[k] ? 1 : 0;
    throw Error("pipeline: " + std::to_string(S) + " stages for a model whose graph can be cut in at most " +
                std::to_string(most) + " (a stage starts only where one activation alone crosses): use at most " +
                std::to_string(most) + " stages");
  }
  std::vector<Range> out(S);
  for (std::size_t s = S, l = L; s > 0; --s) {
    out[s - 1] = Range{cut[s][l], l};
    l = cut[s][l];
  }
  return out;
}

}  // namespace detail
}  // namespace strata
