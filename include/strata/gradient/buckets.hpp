#pragma once
//! Gradient buckets (issue 25, as PyTorch DDP's): a replica's flat gradient
//! cut into contiguous buckets of whole variables, in backward order (from
//! the end of the flat vector down), each one's all-reduce started without
//! waiting as soon as backward has finished its last range
//! (GradientReady, gradient/step_hooks.hpp), so that the reduction of the
//! later layers runs while backward computes the earlier ones; the update
//! waits for every bucket (finish). The plan is fixed by the layout, so
//! every replica issues the same all-reduces in the same order whatever its
//! backward told it: a program that tells nothing gets every bucket started
//! after its step. With a reduction that sums each element in replica order
//! (the direct one) the sums, and so the weights, are bitwise the flat
//! all-reduce's whatever the cut.
//!   auto plan = strata::detail::plan_buckets(sizes, 4 << 20);
//!   buckets.begin(&plan, grad, [&](std::span<float> b) { return ctx.all_reduce_async(b, strata::Sum); });
//!   info.ready = &buckets;  rep.step(batch, rows, info, out);  buckets.finish();

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include <strata/comm/work.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace.hpp>
#include <strata/tensor/shape.hpp>
#include <strata/gradient/step_hooks.hpp>

namespace strata::detail {

//! Buckets whose all-reduce this thread started (a replica's thread, in its
//! backward or at its step's end): a test sees from inside a layer's
//! backward that the later layers' reduction was already under way.
inline std::uint64_t& buckets_started_here() noexcept {
  thread_local std::uint64_t n = 0;
  return n;
}

//! The first bucket's size at most (as DDP's: its reduction starts after
//! the last layers' backward, not after a whole bucket's worth of them).
inline constexpr std::size_t first_bucket_bytes = std::size_t{1} << 20;

//! The buckets of a flat gradient of variables of `sizes` elements (in
//! layout order), in backward order: from the end down, each the fewest
//! whole variables holding at least `bytes` bytes (the first, of the last
//! variables, at least min(bytes, first_bucket_bytes); the last, at the
//! front of the vector, what remains). Empty for no parameters.
//!   plan_buckets({6, 2, 4}, 8) == {{8, 12}, {6, 8}, {0, 6}}
[[nodiscard]] inline std::vector<Range> plan_buckets(const std::vector<std::size_t>& sizes, std::size_t bytes) {
  std::size_t total = 0;
  for (std::size_t n : sizes) total += n;
  std::vector<Range> out;
  std::size_t end = total, lo = total;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    lo -= sizes[i];
    const std::size_t want = out.empty() ? std::min(bytes, first_bucket_bytes) : bytes;
    if ((end - lo) * sizeof(float) >= want && end > lo) {
      out.push_back({lo, end});
      end = lo;
    }
  }
  if (end > 0) out.push_back({0, end});
  return out;
}

//! The same for variables of shapes `shapes` (ModelProgram::variable_shapes()).
[[nodiscard]] inline std::vector<Range> plan_buckets(const std::vector<Shape>& shapes, std::size_t bytes) {
  std::vector<std::size_t> sizes;
  for (const Shape& s : shapes) sizes.push_back(s.elements());
  return plan_buckets(sizes, bytes);
}

//! One replica's buckets in one training step (see the top of the file).
class GradientBuckets final : public GradientReady {
 public:
  //! Starts one bucket's all-reduce (a view of the gradient) and returns its Work.
  using Start = std::function<Work(std::span<float>)>;
  //! What finish does with a bucket once its Work ended (gradient
  //! compression expands it there: gradient/compression.hpp); may be empty.
  using Done = std::function<void(std::span<float>)>;

  //! Before the step: the plan (kept by the caller), the replica's gradient
  //! buffer, how a bucket's reduction starts, and what follows its end.
  void begin(const std::vector<Range>* plan, std::span<float> grad, Start start, Done done = {}) {
    plan_ = plan;
    grad_ = grad;
    start_ = std::move(start);
    done_ = std::move(done);
    next_ = 0;
    final_from_ = grad.size();
    in_order_ = true;
    works_.clear();
  }
  //! Whether a step's buckets were begun and not yet finished.
  [[nodiscard]] bool active() const noexcept { return static_cast<bool>(start_); }

  //! Backward finished [begin, end): the buckets now wholly final start.
  //! Ranges must come from the end down, each ending where the last began;
  //! after one that does not, the rest wait for finish (the same buckets).
  void ready(std::size_t begin, std::size_t end) override {
    if (!start_ || !in_order_) return;
    if (end != final_from_ || begin > end) {
      in_order_ = false;
      return;
    }
    final_from_ = begin;
    while (next_ < plan_->size() && (*plan_)[next_].begin >= final_from_) start_next();
  }

  //! After the step: starts the buckets not started yet, then waits for
  //! every one in issue order (each bounded by the communicator's deadlines;
  //! a failed peer's typed error is thrown, the unwaited Works kept for drop),
  //! each followed by its Done.
  void finish() {
    while (next_ < plan_->size()) start_next();
    trace::Span span{"gradient buckets", trace::Category::Wait, {{"buckets", works_.size()}}};  // what stays exposed
    for (std::size_t i = 0; i < works_.size(); ++i) {  // works_[i] reduces bucket i of the plan
      works_[i].wait();
      if (done_) done_(grad_.subspan((*plan_)[i].begin, (*plan_)[i].size()));
    }
    works_.clear();
    start_ = nullptr;
    done_ = nullptr;
  }

  //! After a failed step, once no replica runs (the team aborted, so what
  //! is pending ends): the Works settle (bounded) and are forgotten.
  void drop() noexcept {
    works_.clear();
    start_ = nullptr;
    done_ = nullptr;
  }

 private:
  void start_next() {
    const Range b = (*plan_)[next_++];
    trace::instant("gradient bucket", trace::Category::Collective, {{"begin", b.begin}, {"end", b.end}});
    works_.push_back(start_(grad_.subspan(b.begin, b.size())));
    ++buckets_started_here();
  }

  const std::vector<Range>* plan_ = nullptr;
  std::span<float> grad_;
  Start start_;
  Done done_;
  std::size_t next_ = 0;        // the next bucket of the plan to start
  std::size_t final_from_ = 0;  // [final_from_, end) of the gradient is final
  bool in_order_ = true;
  std::vector<Work> works_;     // the started buckets' reductions, in issue order
};

}  // namespace strata::detail
