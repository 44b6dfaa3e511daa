#pragma once
//! One replica's shards and windows at ZeRO stage 2 or 3 (the layout and
//! what a step does: parallel/zero/fully_sharded.hpp): its owned slices, the
//! window pairs its layers' values are gathered into (stage 3) and their
//! gradients reduce-scattered from, and the step's collectives in flight.
//! With buckets (shard_buckets.hpp) each layer's gradient window is packed
//! into its bucket's buffer after the layer's backward, and a bucket's
//! reduce-scatter starts once its last layer is packed (two bucket buffers:
//! the third bucket waits for the first's sums, which then go to the
//! replica's owned slices), and stage 3 gathers a bucket's layers at once:
//! every replica's block of its owned values all-gathered into a packed
//! buffer, unpacked into a window of the bucket's layers, the next bucket's
//! gather started meanwhile (forward: the bucket of the next layers;
//! backward: of the previous ones); backward's first bucket is forward's
//! last, still gathered.
//!   strata::detail::ShardedReplica sh{layout, r, 3, {}};
//!   sh.begin_step(gather_async, scatter_async);  info.windows = &sh;  ...;  sh.finish_step();

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>

#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/core/trace.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/kernels/memory.hpp>
#include <strata/parallel/zero/fully_sharded.hpp>
#include <strata/parallel/zero/shard_buckets.hpp>
#include <strata/gradient/step_hooks.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

//! Stage 3's gathers over the process: those whose unit a prefetch had
//! started, and those started when their layer asked (a test sees the
//! next layer's gather started while this one computes).
struct GatherCounts {
  std::atomic<std::uint64_t> prefetched{0}, on_demand{0};
};
inline GatherCounts& gather_counts() noexcept {
  static GatherCounts c;
  return c;
}

//! One replica's shards and windows (stage 2 or 3), and its step's
//! gathers and reductions (see the top of the file).
class ShardedReplica final : public ParameterWindows {
 public:
  //! Starts `in` (this replica's slice) gathered into `out` (the unit), or
  //! `in` (the unit's gradient) reduce-scattered (summed) into `out` (its slice).
  using Collective = std::function<Work(std::span<const float> in, std::span<float> out)>;
  //! One unit's reduce-scatter, as release starts it: the unit's gradient
  //! `in` (in gradient window `window`, 0 or 1), where the unit starts in the
  //! flat layout, and `out`, the replica's slice of the sum (at `owned_at` of
  //! its owned vector). A scatter that compresses keys its own buffers on these.
  struct ScatterCall {
    std::size_t begin = 0;
    int window = 0;
    std::span<const float> in;
    std::span<float> out;
    std::size_t owned_at = 0;
  };
  using Scatter = std::function<Work(const ScatterCall&)>;

  //! Replica r of `layout` at `stage`; stage 2 reads the values from
  //! `values` (the replica's whole copy), stage 3 keeps its own slice.
  //! Its buffers in memory `m` (the host's, or a GPU replica's: then the
  //! collectives and the layers' calls are the device's, stream-ordered).
  //! `buckets` (on: kept by the caller) groups the layers' reduce-scatters.
  ShardedReplica(const ShardLayout& layout, std::size_t r, int stage, std::span<const float> values,
                 kernels::Memory& m = kernels::host_memory(), const ShardBuckets* buckets = nullptr)
      : layout_(&layout), r_(r), stage_(stage), values_(values), m_(&m),
        bk_(buckets && buckets->on() ? buckets : nullptr) {
    const std::size_t slack = bk_ ? bk_->largest_block() : 0;  // a bucket's block read past the last slice
    owned_value_.resize(m, Shape{stage == 3 ? layout.owned(r) + slack : 0});
    owned_grad_.resize(m, Shape{layout.owned(r)});
    value_pool_.resize(m, Shape{stage == 3 && !bk_ ? layout.window_pair() : 0});
    grad_pool_.resize(m, Shape{layout.window_pair()});
    for (int k = 0; k < 2 && bk_; ++k) {
      bucket_buf_[k].resize(m, Shape{layout.replicas() * bk_->largest_block()});
      bucket_sum_[k].resize(m, Shape{bk_->largest_block()});
      if (stage != 3) continue;
      packed_[k].resize(m, Shape{layout.replicas() * bk_->largest_block()});
      bucket_vals_[k].resize(m, Shape{bk_->largest_span()});
    }
  }
  //! Bucket buffer k (0 or 1; every replica's block of the largest bucket):
  //! free between finish_step and the next step's backward (stage 2's gathers use them).
  [[nodiscard]] std::span<float> bucket_buffer(int k) noexcept {
    return {bucket_buf_[k].data(), bucket_buf_[k].size()};
  }

  //! Stage 3: its slice of the values (owned layout). Stage 2: empty.
  [[nodiscard]] std::span<float> owned_values() noexcept {
    return {owned_value_.data(), stage_ == 3 ? layout_->owned(r_) : 0};
  }
  //! Its slice of the step's summed gradient (valid after finish_step).
  [[nodiscard]] std::span<float> owned_gradient() noexcept { return {owned_grad_.data(), owned_grad_.size()}; }

  //! Before the step: how this step's collectives start (over the replica's context).
  void begin_step(Collective gather, Collective scatter) {
    begin_step(std::move(gather), [s = std::move(scatter)](const ScatterCall& k) { return s(k.in, k.out); });
  }
  void begin_step(Collective gather, Scatter scatter) {
    gather_ = std::move(gather);
    scatter_ = std::move(scatter);
    current_ = npos;  // the values may have changed since a bucket was gathered
  }
  //! After the step's backward: every reduction waited for (its typed error
  //! thrown), so that owned_gradient() holds the sums.
  void finish_step() {
    trace::Span span{"sharded gradient", trace::Category::Wait, {{"units", layout_->units().size()}}};
    for (Work& w : scatter_work_) w.wait();
    if (bk_) {
      if (next_bucket_ != bk_->buckets().size())
        throw Error("sharded gradients by buckets: " + std::to_string(bk_->buckets().size() - next_bucket_) + " of " +
                    std::to_string(bk_->buckets().size()) + " buckets were not complete after backward (a layer's "
                    "gradient was not finished)");
      const int older = slot_bucket_[0] < slot_bucket_[1] ? 0 : 1;
      settle(older);
      settle(1 - older);
      next_bucket_ = 0;
    }
    gathered_.wait();
    prefetched_ = npos;
    current_ = npos;
  }
  //! After a failed step, once no replica runs: pending work settles (bounded) and is forgotten.
  void drop() noexcept {
    for (Work& w : scatter_work_) w = Work{};
    for (int k = 0; k < 2; ++k) bucket_work_[k] = Work{}, slot_bucket_[k] = npos;
    next_bucket_ = 0;
    gathered_ = Work{};
    prefetched_ = npos;
    current_ = npos;
  }

  View acquire(std::size_t begin, std::size_t end, bool backward) override {
    const std::size_t u = layout_->unit_at(begin, end);
    View v;
    if (stage_ == 3 && bk_) {
      v.value = gather_bucket(u, backward);
    } else if (stage_ == 3) {
      v.value = gather(u, backward);
    } else {
      v.value = values_.subspan(begin, end - begin);
    }
    if (backward && bk_) {
      v.grad = window(grad_pool_, next_grad_, end - begin);  // packed into its bucket at release: free again
    } else if (backward) {
      Work& pending = scatter_work_[next_grad_];
      trace::Span span{"gradient window", trace::Category::Wait, {{"unit", u}}};
      pending.wait();  // the reduction that last used this window (two layers ago) has ended
      v.grad = window(grad_pool_, next_grad_, end - begin);
    }
    return v;
  }
  void release(std::size_t begin, std::size_t end, bool backward) override {
    if (!backward) return;  // a forward's window is overwritten by the gather after next: nothing to do
    const std::size_t u = layout_->unit_at(begin, end);
    if (bk_) return release_to_bucket(u, window(grad_pool_, next_grad_, end - begin));
    const Range s = layout_->slice(u, r_);
    trace::instant("sharded gradient", trace::Category::Collective, {{"begin", begin}, {"end", end}});
    const std::size_t at = layout_->owned_at(u, r_);
    scatter_work_[next_grad_] = scatter_({begin, next_grad_, window(grad_pool_, next_grad_, end - begin),
                                          owned_gradient().subspan(at, s.size()), at});
    next_grad_ = 1 - next_grad_;
  }

 private:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  //! Unit u's gradient (window `g`) into its bucket's buffer; the bucket's
  //! reduce-scatter started once its last layer (the lowest) is in. A
  //! bucket's first layer takes buffer k = bucket % 2 after the bucket two
  //! before it there has settled.
  void release_to_bucket(std::size_t u, std::span<const float> g) {
    const std::size_t b = bk_->of_unit(u);
    const ShardBucket& B = bk_->buckets()[b];
    const int k = static_cast<int>(b % 2);
    if (u + 1 == B.ub) {  // the bucket's first layer in backward
      if (b != next_bucket_)
        throw Error("sharded gradients by buckets: layer unit " + std::to_string(u) +
                    " finished its backward out of the buckets' order (bucket " + std::to_string(b) + " before " +
                    std::to_string(next_bucket_) + ")");
      settle(k);
      slot_bucket_[k] = b;
    }
    bk_->pack(*m_, *layout_, u, g.data(), bucket_buf_[k].data());
    next_grad_ = 1 - next_grad_;
    if (u != B.ua) return;
    trace::instant("sharded gradient bucket", trace::Category::Collective, {{"bucket", b}, {"units", B.ub - B.ua}});
    const std::size_t p = layout_->replicas();
    bucket_work_[k] = scatter_({layout_->units()[B.ua].begin, k, {bucket_buf_[k].data(), p * B.block},
                                {bucket_sum_[k].data(), B.block}, layout_->owned_at(B.ua, r_)});
    ++next_bucket_;
    ++buckets_started_here();  // (buckets.hpp: a probe inside backward sees the later layers' buckets started)
  }
  //! The bucket in buffer k (if any): its reduce-scatter waited for, its sums moved to the owned gradient.
  void settle(int k) {
    if (slot_bucket_[k] == npos) return;
    const ShardBucket& B = bk_->buckets()[slot_bucket_[k]];
    bucket_work_[k].wait();
    const std::size_t n = ShardBuckets::owned_in(*layout_, B, r_);
    if (n) m_->copy(owned_gradient().data() + layout_->owned_at(B.ua, r_), bucket_sum_[k].data(), n * sizeof(float));
    slot_bucket_[k] = npos;
  }

  //! Window `win` of `pool` for a unit of `n` floats: the front, or the back
  //! (the two hold adjacent units, whose sizes sum to at most the pool's).
  static std::span<float> window(kernels::Buffer<float>& pool, int win, std::size_t n) {
    return {pool.data() + (win == 0 ? 0 : pool.size() - n), n};
  }

  //! Unit u's values in a window: the prefetched one, else gathered now;
  //! then the next unit in this direction's order prefetched into the other.
  std::span<const float> gather(std::size_t u, bool backward) {
    int win = pf_win_;
    (prefetched_ == u ? gather_counts().prefetched : gather_counts().on_demand).fetch_add(1, std::memory_order_relaxed);
    if (prefetched_ != u) {  // not prefetched: gathered now (a prefetch of another unit ends first)
      gathered_.wait();
      win = 1 - last_win_;
      start_gather(u, win);
    }
    {
      trace::Span span{"parameter gather", trace::Category::Wait, {{"unit", u}}};
      gathered_.wait();
    }
    last_win_ = win;
    prefetched_ = npos;
    const std::size_t units = layout_->units().size();
    const std::size_t next = backward ? (u == 0 ? npos : u - 1) : (u + 1 < units ? u + 1 : npos);
    if (next != npos) {  // into the other window, which the last layer released
      pf_win_ = 1 - win;
      start_gather(next, pf_win_);
      prefetched_ = next;
    }
    return window(value_pool_, win, layout_->units()[u].size());
  }
  //! Stage 3 by buckets: unit u's values in the window of its bucket's
  //! layers (the bucket gathered now, or its prefetch waited for and
  //! unpacked; still there when it is the last one gathered); then, unless a
  //! prefetch is under way, the next bucket in this direction's order
  //! prefetched into the other packed buffer.
  std::span<const float> gather_bucket(std::size_t u, bool backward) {
    const std::size_t b = bk_->of_unit(u);
    const ShardBucket& B = bk_->buckets()[b];
    if (current_ != b) {
      auto& count = prefetched_ == b ? gather_counts().prefetched : gather_counts().on_demand;
      count.fetch_add(1, std::memory_order_relaxed);
      const int win = 1 - cur_win_;  // the window of the bucket before the current one: no layer reads it now
      if (prefetched_ != b) {
        gathered_.wait();  // a prefetch of another bucket ends first
        start_bucket_gather(b, win);
      }
      {
        trace::Span span{"parameter gather", trace::Category::Wait, {{"bucket", b}}};
        gathered_.wait();
      }
      prefetched_ = npos;
      bk_->unpack(*m_, *layout_, b, packed_[win].data(), bucket_vals_[win].data(), layout_->units()[B.ua].begin);
      cur_win_ = win;
      current_ = b;
    }
    const std::size_t nb = bk_->buckets().size();
    const std::size_t next = backward ? (b + 1 < nb ? b + 1 : npos) : (b == 0 ? npos : b - 1);
    if (prefetched_ == npos && next != npos) {  // into the other window's packed buffer, which no gather uses now
      start_bucket_gather(next, 1 - cur_win_);
      prefetched_ = next;
    }
    const Range unit = layout_->units()[u];
    return {bucket_vals_[cur_win_].data() + (unit.begin - layout_->units()[B.ua].begin), unit.size()};
  }
  void start_bucket_gather(std::size_t b, int win) {
    const ShardBucket& B = bk_->buckets()[b];
    gathered_ = gather_(std::span<const float>(owned_value_.data() + layout_->owned_at(B.ua, r_), B.block),
                        std::span<float>(packed_[win].data(), layout_->replicas() * B.block));
  }
  void start_gather(std::size_t u, int win) {
    const Range s = layout_->slice(u, r_);
    gathered_ = gather_(std::span<const float>(owned_values().data() + layout_->owned_at(u, r_), s.size()),
                        window(value_pool_, win, layout_->units()[u].size()));
  }

  const ShardLayout* layout_;
  std::size_t r_;
  int stage_;
  std::span<const float> values_;        // stage 2: the replica's whole copy
  kernels::Memory* m_;
  const ShardBuckets* bk_;               // the layers' reduce-scatters by buckets (null: one a layer)
  kernels::Buffer<float> bucket_buf_[2], bucket_sum_[2];  // a bucket's every block; its sums here
  Work bucket_work_[2];                  // each bucket buffer's reduce-scatter
  std::size_t slot_bucket_[2] = {npos, npos};  // the bucket each buffer holds (npos: none)
  std::size_t next_bucket_ = 0;          // the next bucket to start, in the plan's order
  kernels::Buffer<float> packed_[2], bucket_vals_[2];  // stage 3 by buckets: a gather's blocks; a bucket's layers
  std::size_t current_ = npos;           // the bucket whose values are in bucket_vals_[cur_win_]
  int cur_win_ = 0;
  kernels::Buffer<float> owned_value_, owned_grad_;
  kernels::Buffer<float> value_pool_, grad_pool_;  // each a pair of windows: 0 from the front, 1 from the back
  Collective gather_;
  Scatter scatter_;
  Work gathered_;                        // the gather in flight (or done, not waited)
  std::size_t prefetched_ = npos;        // the unit it gathers, when a prefetch
  int pf_win_ = 0;                       // that prefetch's window
  int last_win_ = 0;                     // the window of the unit last acquired
  Work scatter_work_[2];                 // each gradient window's reduction
  int next_grad_ = 0;
};

}  // namespace strata::detail
