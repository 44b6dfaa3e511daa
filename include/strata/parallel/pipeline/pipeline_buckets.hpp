#pragma once
//! Gradient buckets for a pipeline's data-parallel copies on other ranks
//! (pipeline_executor.hpp, RankStages): the copies of a stage sum its
//! gradient bucket by bucket, each bucket's all-reduce started as the
//! batch's last backward finishes its layers (LastBackward,
//! execution/program.hpp) while backward goes on. A tensor-parallel stage
//! buckets each member's own layout; a bucket's non-finite values are
//! counted before its sum, and compressed it is summed in 16 bits. A GPU
//! stage's bucket goes through the stage's host copy of its gradient.
//! Between two copies the weights are the flat sum's bit for bit.
//!   CopyBuckets bk;  bk.plan(program.variable_shapes(), slice, segs, T, t, 4 << 20);
//!   const LastBackward* last = bk.begin(grad, comp, copies, &count, link);  ... backward(..., last) ...
//!   bk.finish();   // every bucket summed (and expanded)

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/work.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/host/maps.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/execution/program.hpp>
#include <strata/device/tensor_group.hpp>
#include <strata/tensor/shape.hpp>

namespace strata::detail {

class CopyBuckets {
 public:
  //! The buckets of at least `bytes` bytes (0: none) over a stage's
  //! variables: those of the model's `shapes` (in layout order) that lie in
  //! its parameters' slice `slice`, in the stage's own offsets. Member `t`
  //! of a stage split by tensor parallelism (T > 1): over its own layout
  //! `segs` (what it holds, in its buffer's order: the same on every copy),
  //! a bucket's non-finite values counted where the member counts them (its
  //! own elements; member 0 the replicated ones too).
  void plan(const std::vector<Shape>& shapes, Range slice, std::span<const TensorSegment> segs, std::size_t T,
            std::size_t t, std::size_t bytes) {
    plan_.clear();
    counted_.clear();
    std::vector<std::size_t> sizes;
    if (T == 1) {
      counted_.push_back({0, slice.size()});
      for (std::size_t i = 0, at = 0; i < shapes.size(); at += shapes[i++].elements())
        if (at >= slice.begin && at < slice.end) sizes.push_back(shapes[i].elements());
    } else {
      std::size_t at = 0;
      for (const TensorSegment& g : segs) {
        if (!g.replicated || t == 0) counted_.push_back({at, at + g.length});
        sizes.push_back(g.length);
        at += g.length;
      }
    }
    if (bytes) plan_ = plan_buckets(sizes, bytes);
  }
  //! Whether a stage's sum goes by buckets (a plan, some parameters).
  [[nodiscard]] bool on() const noexcept { return !plan_.empty(); }
  //! What the summary says of buckets of `bytes` bytes asked for `copies` copies (none asked: nothing).
  [[nodiscard]] std::string words(std::size_t bytes, std::size_t copies) const {
    if (bytes == 0 || copies < 2) return {};
    if (!on())
      return "the copies' sum after the stage's backward, not by buckets (they apply to stages with parameters "
             "whose copies run on other ranks)";
    return "the copies' sum in " + std::to_string(plan_.size()) + (plan_.size() == 1 ? " bucket" : " buckets") +
           " of " + std::to_string((bytes + 1023) >> 10) + " KiB, each started as the last micro-batch's backward ends it";
  }

  //! Copies elements [lo, hi) of a GPU stage's gradient into its host copy (the bucket's range).
  using Fetch = std::function<void(std::size_t, std::size_t)>;

  //! Before a batch whose last backward tells its gradient `g` (host
  //! memory; a GPU stage's host copy, each bucket's range filled by
  //! `fetch` as the bucket starts) as it ends each layer: every bucket, once
  //! final, has its non-finite values added to `*bad` (null: not counted)
  //! and starts its sum over `link` (all_reduce_async among the copies;
  //! through `comp`'s 16 bits when on). Returns what the stage's last
  //! backward is given.
  template <class Link>
  const LastBackward* begin(std::span<float> g, GradientCompression& comp, int copies, double* bad, Link& link,
                            Fetch fetch = {}) {
    auto start = comp.bucket_start(link, g);
    buckets_.begin(
        &plan_, g,
        [this, bad, base = g.data(), start = std::move(start), fetch = std::move(fetch)](std::span<float> b) {
          const auto lo = static_cast<std::size_t>(b.data() - base);
          if (fetch && !b.empty()) fetch(lo, lo + b.size());
          if (bad) *bad += counted_nonfinite(base, b);
          return start(b);
        },
        comp.bucket_done(g));
    last_ = LastBackward{&buckets_, copies};
    return &last_;
  }
  //! After the backward: starts what was not told final (an empty share's
  //! gradient, which no backward ran for), waits for every bucket (each
  //! bounded by the communicator's deadlines), expands them when compressed.
  void finish() { buckets_.finish(); }
  //! After a failed step: what is in flight is forgotten.
  void drop() noexcept { buckets_.drop(); }

 private:
  //! The non-finite values of bucket `b` (of the gradient at `base`) where they are counted.
  [[nodiscard]] double counted_nonfinite(const float* base, std::span<const float> b) const {
    const auto lo = static_cast<std::size_t>(b.data() - base), hi = lo + b.size();
    double n = 0;
    for (const Range& c : counted_)
      if (c.begin < hi && lo < c.end) {
        const std::size_t from = std::max(c.begin, lo), to = std::min(c.end, hi);
        n += static_cast<double>(kernels::host::count_nonfinite(base + from, to - from));
      }
    return n;
  }

  std::vector<Range> plan_;
  std::vector<Range> counted_;  // where the gradient's non-finite values are counted (own offsets)
  GradientBuckets buckets_;
  LastBackward last_;
};

}  // namespace strata::detail
