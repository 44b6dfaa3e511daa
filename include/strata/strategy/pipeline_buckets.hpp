#pragma once
//! Gradient buckets for a pipeline's data-parallel copies on other ranks
//! (issue 25; pipeline_executor.hpp, RankStages): the copies of a stage sum
//! its gradient bucket by bucket, each bucket's all-reduce among them
//! started as the batch's last backward on the stage finishes its layers
//! (LastBackward, strategy/program.hpp), while backward goes on down the
//! stage and, on the earlier stages, down the pipeline. Each bucket's
//! non-finite values are counted before its sum starts (the pipeline's
//! check reads the copy's own gradient, as without buckets) and, compressed,
//! it is rounded with its residual and summed in 16 bits (compression.hpp).
//! Between two copies each element's sum is a + b, so the weights are the
//! flat sum's bit for bit; with more copies, as the copies' all-reduce
//! algorithm adds each bucket (the direct one: the same bits too). With
//! several stages, the rank's send to the stage before it runs between two
//! looks of a bucket's sum (the MPI lock is handed over: comm/mpi/runtime.hpp).
//!   CopyBuckets bk;  bk.plan(program.variable_shapes(), slice, 4 << 20);
//!   const LastBackward* last = bk.begin(grad, comp, copies, &count, link);  ... backward(..., last) ...
//!   bk.finish();   // every bucket summed (and expanded)

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/work.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/host/maps.hpp>
#include <strata/strategy/buckets.hpp>
#include <strata/strategy/compression.hpp>
#include <strata/strategy/program.hpp>
#include <strata/tensor/shape.hpp>

namespace strata::detail {

class CopyBuckets {
 public:
  //! The buckets of at least `bytes` bytes (0: none) over a stage's
  //! variables: those of the model's `shapes` (in layout order) that lie in
  //! its parameters' slice `slice`, in the stage's own offsets.
  void plan(const std::vector<Shape>& shapes, Range slice, std::size_t bytes) {
    plan_.clear();
    if (bytes == 0) return;
    std::vector<std::size_t> sizes;
    for (std::size_t i = 0, at = 0; i < shapes.size(); at += shapes[i++].elements())
      if (at >= slice.begin && at < slice.end) sizes.push_back(shapes[i].elements());
    plan_ = plan_buckets(sizes, bytes);
  }
  //! Whether a stage's sum goes by buckets (a plan, some parameters).
  [[nodiscard]] bool on() const noexcept { return !plan_.empty(); }
  //! What the summary says of buckets of `bytes` bytes asked for `copies` copies (none asked: nothing).
  [[nodiscard]] std::string words(std::size_t bytes, std::size_t copies) const {
    if (bytes == 0 || copies < 2) return {};
    if (!on())
      return "the copies' sum after the stage's backward, not by buckets (they apply to CPU stages with "
             "parameters, of one member, whose copies run on other ranks)";
    return "the copies' sum in " + std::to_string(plan_.size()) + (plan_.size() == 1 ? " bucket" : " buckets") +
           " of " + std::to_string((bytes + 1023) >> 10) + " KiB, each started as the last micro-batch's backward ends it";
  }

  //! Before a batch whose last backward tells its gradient `g` (host
  //! memory) as it ends each layer: every bucket, once final, has its
  //! non-finite values added to `*bad` (null: not counted) and starts its
  //! sum over `link` (all_reduce_async among the copies; through `comp`'s 16
  //! bits when on). Returns what the stage's last backward is given.
  template <class Link>
  const LastBackward* begin(std::span<float> g, GradientCompression& comp, int copies, double* bad, Link& link) {
    auto start = comp.bucket_start(link, g);
    buckets_.begin(
        &plan_, g,
        [bad, start = std::move(start)](std::span<float> b) {
          if (bad) *bad += static_cast<double>(kernels::host::count_nonfinite(b.data(), b.size()));
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
  std::vector<Range> plan_;
  GradientBuckets buckets_;
  LastBackward last_;
};

}  // namespace strata::detail
