#pragma once
//! Sharded data parallelism: ZeRO stage 1's step (sharded_update, which the
//! mirrored executor runs on CPU and GPU replicas), and the layout of stages
//! 2 and 3 (ShardLayout): the flat parameters cut into units, one per layer
//! with parameters; replica r of p owns slice shard_range(unit, p, r) of
//! every unit (of its summed gradient and optimizer state at stage 2, and of
//! its values at stage 3), its owned elements one contiguous vector. A step
//! goes through the replica's ParameterWindows (sharded_replica.hpp): stage
//! 3 gathers a layer's values before its forward and backward, a layer's
//! gradient is reduce-scattered after its backward, each replica updates
//! its slice. model_state_bytes is the memory per replica. Sums in replica
//! order, as the direct all-reduce's: the weights of stages 0 and 1.
//!   strata::detail::ShardLayout layout{unit_sizes, p};

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/kernels/memory.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/parallel/zero/logical_slices.hpp>
#include <strata/execution/program.hpp>
#include <strata/gradient/step_hooks.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

//! One replica's share of the sharded update, over its collectives `coll`
//! (a replica context, or anything with its reduce_scatter and all_gather):
//! reduce-scatter `grad` into `shard` (this replica's slice `mine` of the
//! sum), `update(values slice, shard)` (a bool result: false skips the
//! rest, on every replica alike), all-gather every replica's updated slice
//! into `values`. Spans of memory `m`; `shard` holds mine.size().
//!   sharded_update(ctx, w, g, shard, shard_range(n, p, r), [&](auto w, auto g) { adam.apply(w, g, st, 0, it); });
template <class Coll, class Update>
void sharded_update(Coll& coll, kernels::Memory& m, std::span<float> values, std::span<const float> grad,
                    std::span<float> shard, Range mine, Update&& update) {
  coll.reduce_scatter(grad, shard, Sum);
  const std::span<float> part = values.subspan(mine.begin, mine.size());
  if constexpr (std::is_same_v<decltype(update(part, std::span<const float>(shard))), bool>) {
    if (!update(part, std::span<const float>(shard))) return;
  } else {
    update(part, std::span<const float>(shard));
  }
  // all-gather from a buffer no one writes meanwhile (not from the copies being written)
  if (mine.size()) m.copy(shard.data(), part.data(), mine.size() * sizeof(float));
  coll.all_gather(std::span<const float>(shard), values);
}
//! The same on host memory.
template <class Coll, class Update>
void sharded_update(Coll& coll, std::span<float> values, std::span<const float> grad, std::span<float> shard,
                    Range mine, Update&& update) {
  sharded_update(coll, kernels::host_memory(), values, grad, shard, mine, std::forward<Update>(update));
}

//! Where every replica's shards lie: the units (contiguous ranges of the
//! flat parameters, in order, together covering them) and the p owners.
//! Across workers (groups: worker w runs groups[w] replicas, numbered after
//! those of workers 0 .. w-1) each unit is cut first by worker,
//! shard_range(unit, W, w) (what MPI's reduce-scatter and all-gather
//! between the workers move), then by local replica, shard_range(that
//! block, groups[w], l); one group is the one-process layout,
//! shard_range(unit, p, r).
class ShardLayout {
 public:
  ShardLayout() = default;
  //! Units of `sizes` elements each (zero sizes dropped), over `p` replicas in one process.
  ShardLayout(const std::vector<std::size_t>& sizes, std::size_t p)
      : ShardLayout(sizes, std::vector<std::size_t>{p}) {}
  //! The same over workers of `groups[w]` replicas each (none empty).
  ShardLayout(const std::vector<std::size_t>& sizes, const std::vector<std::size_t>& groups) {
    where_.clear();
    for (std::size_t w = 0; w < groups.size(); ++w) {
      if (!groups[w]) throw Error("ShardLayout: worker " + std::to_string(w) + " has no replica");
      for (std::size_t l = 0; l < groups[w]; ++l) where_.push_back({w, l, groups[w]});
    }
    workers_ = groups.size();
    p_ = where_.size();
    std::size_t at = 0;
    for (std::size_t n : sizes) {
      if (n) units_.push_back({at, at + n});
      at += n;
      if (n > largest_) second_ = largest_, largest_ = n;
      else second_ = std::max(second_, n);
    }
    n_ = at;
    own_.assign(p_, {});
    owned_.assign(p_, 0);
    for (std::size_t r = 0; r < p_; ++r)
      for (std::size_t u = 0; u < units_.size(); ++u) {
        own_[r].push_back(owned_[r]);
        owned_[r] += slice(u, r).size();
      }
  }
  [[nodiscard]] std::size_t params() const noexcept { return n_; }
  [[nodiscard]] std::size_t replicas() const noexcept { return p_; }
  [[nodiscard]] const std::vector<Range>& units() const noexcept { return units_; }
  [[nodiscard]] std::size_t largest() const noexcept { return largest_; }
  //! Floats two adjacent units' windows take at most (the largest and the
  //! second largest): a window pair lives in one buffer of this size, one
  //! window from its front, the other from its back.
  [[nodiscard]] std::size_t window_pair() const noexcept { return largest_ + second_; }
  //! Elements replica r owns (its slice of every unit).
  [[nodiscard]] std::size_t owned(std::size_t r) const { return owned_[r]; }
  //! Replica r's slice of unit u, within the unit.
  [[nodiscard]] Range slice(std::size_t u, std::size_t r) const {
    const Place& at = where_[r];
    const Range block = worker_block(u, at.worker);
    const Range s = shard_range(block.size(), at.of, at.local);
    return {block.begin + s.begin, block.begin + s.end};
  }
  //! The part of unit u (within it) worker w's replicas own together.
  [[nodiscard]] Range worker_block(std::size_t u, std::size_t w) const {
    return shard_range(units_[u].size(), workers_, w);
  }
  [[nodiscard]] std::size_t workers() const noexcept { return workers_; }
  //! Where that slice starts in replica r's owned vector.
  [[nodiscard]] std::size_t owned_at(std::size_t u, std::size_t r) const { return own_[r][u]; }
  //! The unit that starts at `begin` of the flat layout, else an Error.
  [[nodiscard]] std::size_t unit_at(std::size_t begin, std::size_t end) const {
    const auto it = std::lower_bound(units_.begin(), units_.end(), begin,
                                     [](const Range& u, std::size_t b) { return u.begin < b; });
    if (it == units_.end() || it->begin != begin || it->end != end)
      throw Error("sharded parameters: [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") is not one layer's range of the shard layout");
    return static_cast<std::size_t>(it - units_.begin());
  }
  //! fn(flat range, owned offset) for each of replica r's slices, unit by unit.
  template <class F>
  void for_each_slice(std::size_t r, F&& fn) const {
    for (std::size_t u = 0; u < units_.size(); ++u) {
      const Range s = slice(u, r);
      fn(Range{units_[u].begin + s.begin, units_[u].begin + s.end}, own_[r][u]);
    }
  }

 private:
  struct Place {
    std::size_t worker, local, of;  // of: the worker's replicas
  };
  std::vector<Place> where_{{0, 0, 1}};
  std::size_t workers_ = 1;
  std::size_t p_ = 1, n_ = 0, largest_ = 0, second_ = 0;
  std::vector<Range> units_;
  std::vector<std::vector<std::size_t>> own_;  // per replica, per unit: the slice's start in its owned vector
  std::vector<std::size_t> owned_;
};

//! Whole slots of a flat layout from each replica's owned slots (`part(r)`:
//! its slots, each layout.owned(r) elements), or the reverse (owned_part).
template <class Part>
std::vector<Tensor<float>> join_owned(const ShardLayout& layout, Part&& part) {
  std::vector<Tensor<float>> out;
  for (std::size_t r = 0; r < layout.replicas(); ++r) {
    const std::vector<Tensor<float>> mine = part(r);
    if (out.empty())
      for (std::size_t k = 0; k < mine.size(); ++k) out.emplace_back(Shape{layout.params()});
    for (std::size_t k = 0; k < mine.size(); ++k)
      layout.for_each_slice(r, [&](Range flat, std::size_t at) {
        std::copy_n(mine[k].data() + at, flat.size(), out[k].data() + flat.begin);
      });
  }
  return out;
}
//! Replica r's owned part of each whole slot.
inline std::vector<Tensor<float>> owned_part(const ShardLayout& layout, std::size_t r,
                                             std::span<const Tensor<float>> whole) {
  std::vector<Tensor<float>> out;
  for (const Tensor<float>& t : whole) {
    Tensor<float> mine{Shape{layout.owned(r)}};
    layout.for_each_slice(r, [&](Range flat, std::size_t at) {
      std::copy_n(t.data() + flat.begin, flat.size(), mine.data() + at);
    });
    out.push_back(std::move(mine));
  }
  return out;
}

//! join_owned across workers (collective: every worker calls it): local
//! replicas [first, first + local) of `layout` give their slots (`part(r)`),
//! each worker's joined and all-gathered over `comm` into whole slots.
template <class Comm, class Part>
std::vector<Tensor<float>> join_owned_across_workers(Comm& comm, const ShardLayout& layout, std::size_t first,
                                                     std::size_t local, Part&& part) {
  const std::size_t p = layout.replicas();
  std::vector<std::vector<Tensor<float>>> mine(local);
  for (std::size_t r = 0; r < local; ++r) mine[r] = part(r);
  // every worker joins the same number of slots (the same model and optimizer: agreed at placing)
  const std::size_t slots = mine.empty() ? 0 : mine.front().size();
  std::size_t here = 0, all = 0;
  for (std::size_t g = 0; g < p; ++g) (g >= first && g < first + local ? here : all) += layout.owned(g);
  all += here;
  agree_on_state_read(comm,
                      "reading the sharded state (ZeRO 2 and 3 across workers: each worker holds its shards only) "
                      "is collective: call save_checkpoint (at stage 3 also get_weights, save_weights) on every "
                      "worker together, the chief alone writes; ",
                      slots, all);
  std::vector<Tensor<float>> out;
  std::vector<float> send(here), got(all);
  for (std::size_t k = 0; k < slots; ++k) {
    std::size_t at = 0;
    for (std::size_t r = 0; r < local; ++r) {
      std::copy_n(mine[r][k].data(), layout.owned(first + r), send.data() + at);
      at += layout.owned(first + r);
    }
    trace::Span span{"sharded state gather", trace::Category::Collective, {{"floats", all}}};
    comm.all_gather(std::span<const float>(send), std::span<float>(got));
    Tensor<float>& whole = out.emplace_back(Shape{layout.params()});
    std::size_t from = 0;  // replica g's owned vector in `got`: replicas in global order
    for (std::size_t g = 0; g < p; ++g) {
      layout.for_each_slice(g, [&](Range flat, std::size_t o) {
        std::copy_n(got.data() + from + o, flat.size(), whole.data() + flat.begin);
      });
      from += layout.owned(g);
    }
  }
  return out;
}

//! Bytes of model state one replica holds at ZeRO stage `stage` over `p`
//! replicas (values, gradient, `slots` optimizer slots; stage 1's reduced
//! slice, stages 2 and 3's window pairs of `pair` floats each: the largest
//! and second largest layer), the formula ExecutorOptions::
//! memory_budget_bytes is checked against. `compressed` (gradient
//! compression's error feedback) adds its residual of the whole gradient:
//! stages 0 and 1 the residual, the next one and the 16-bit gradient;
//! stages 2 and 3 one residual, a 16-bit window pair and slice.
//! `buckets`: the floats of stages 2 and 3's bucket buffers (ShardBuckets).
[[nodiscard]] inline std::size_t model_state_bytes(int stage, std::size_t n, std::size_t p, std::size_t slots,
                                                   std::size_t pair, bool compressed = false, std::size_t buckets = 0) {
  const std::size_t owned = (n + p - 1) / p, windows = pair;
  std::size_t floats = 0, halves = 0;
  switch (stage) {
    case 0: floats = n + n + slots * n; break;
    case 1: floats = n + n + owned + slots * owned; break;
    case 2: floats = n + owned + windows + slots * owned; break;
    default: floats = (owned + windows) + (owned + windows) + slots * owned; break;
  }
  if (stage >= 2) floats += buckets;
  if (compressed && stage < 2) {
    floats += 2 * n;
    halves += n + (stage == 1 ? owned : 0);
  } else if (compressed) {
    floats += n;
    halves += windows + owned;
  }
  return floats * sizeof(float) + halves * 2;
}

//! Fails fast when one replica's model state at `stage` (model_state_bytes;
//! the optimizer's slots counted from `program` once compiled) exceeds
//! `budget` bytes (0: no budget), naming what it needs and what would fit.
inline void check_model_state_budget(std::size_t budget, int stage, std::size_t n, std::size_t p,
                                     const ModelProgram& program, bool compressed = false, std::size_t buckets = 0) {
  if (!budget) return;
  std::vector<std::size_t> units;  // a layer's parameters each (a variable's where there are no layers)
  try {
    units = program.layer_param_counts();
  } catch (const Error&) {
    for (const Shape& v : program.variable_shapes()) units.push_back(v.elements());
  }
  const std::size_t pair = ShardLayout(units, p).window_pair();
  const std::size_t slots = program.compiled() ? program.make_updater(1)->state().size() : 0;
  const std::size_t need = model_state_bytes(stage, n, p, slots, pair, compressed, buckets);
  if (need <= budget) return;
  std::string fits;
  for (int st = stage + 1; st <= 3 && fits.empty() && p > 1; ++st)
    if (model_state_bytes(st, n, p, slots, pair, compressed, buckets) <= budget) fits = "ZeRO stage " + std::to_string(st) + " would fit";
  throw Error("the model state of one replica at ZeRO stage " + std::to_string(stage) + " over " + std::to_string(p) +
              " replicas is " + std::to_string(need) + " bytes (" + std::to_string(n) + " parameters: values, gradient, " +
              std::to_string(slots) + " optimizer slots" + (compressed ? ", the compression's residual" : "") +
              ") but ExecutorOptions::memory_budget_bytes is " +
              std::to_string(budget) + (fits.empty() ? ": add replicas or raise the budget" : ": " + fits +
              " (ExecutorOptions::sharded_update)"));
}

}  // namespace strata::detail
