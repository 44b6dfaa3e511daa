#pragma once
//! ZeRO stages 2 and 3 by buckets (ExecutorOptions::bucket_bytes): the
//! layers' reduce-scatters after their backward grouped into buckets of
//! whole layers (plan_buckets over the shard units, backward order, the
//! first small), and stage 2's all-gather of the updated slices by the same
//! buckets: fewer, larger collectives. The shard layout stays the per-layer
//! one: a bucket's buffer holds each replica q's slices of its layers at q's
//! block (padded to the largest), so the collective's equal cut hands every
//! replica its own slices. Each element is summed as the per-layer
//! reduce-scatter sums it: the same bits.
//!   ShardBuckets bk(layout, 4 << 20);
//!   bk.pack(m, layout, u, unit_grad, send);   // each layer after its backward; then reduce-scatter send

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/memory.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/parallel/zero/fully_sharded.hpp>

namespace strata::detail {

//! Units [ua, ub) of a shard layout, each replica's slices of them `block` floats at most.
struct ShardBucket {
  std::size_t ua = 0, ub = 0, block = 0;
};

class ShardBuckets {
 public:
  ShardBuckets() = default;
  //! Buckets of at least `bytes` bytes (0: none) over `layout`'s units.
  ShardBuckets(const ShardLayout& layout, std::size_t bytes) {
    const std::vector<Range>& units = layout.units();
    if (!bytes || units.empty()) return;
    std::vector<std::size_t> sizes;
    for (const Range& u : units) sizes.push_back(u.size());
    of_unit_.assign(units.size(), 0);
    for (const Range& r : plan_buckets(sizes, bytes)) {  // element ranges of the units' concatenation
      ShardBucket b;
      for (std::size_t u = 0, at = 0; u < units.size(); at += units[u++].size()) {
        if (at == r.begin) b.ua = u;
        if (at + units[u].size() == r.end) b.ub = u + 1;
      }
      for (std::size_t q = 0; q < layout.replicas(); ++q) b.block = std::max(b.block, owned_in(layout, b, q));
      for (std::size_t u = b.ua; u < b.ub; ++u) of_unit_[u] = buckets_.size();
      largest_ = std::max(largest_, b.block);
      span_ = std::max(span_, r.size());
      buckets_.push_back(b);
    }
  }
  [[nodiscard]] bool on() const noexcept { return !buckets_.empty(); }
  //! In backward order (the last layers' first).
  [[nodiscard]] const std::vector<ShardBucket>& buckets() const noexcept { return buckets_; }
  [[nodiscard]] std::size_t of_unit(std::size_t u) const { return of_unit_.at(u); }
  //! The largest bucket's block: a bucket's buffer takes replicas() blocks of at most this.
  [[nodiscard]] std::size_t largest_block() const noexcept { return largest_; }
  //! The elements of the largest bucket's layers (stage 3's value window).
  [[nodiscard]] std::size_t largest_span() const noexcept { return span_; }
  //! Floats of replica q's own slices of bucket b's layers (the first of its block).
  [[nodiscard]] static std::size_t owned_in(const ShardLayout& L, const ShardBucket& b, std::size_t q) {
    const std::size_t end = b.ub < L.units().size() ? L.owned_at(b.ub, q) : L.owned(q);
    return end - L.owned_at(b.ua, q);
  }
  //! The floats one replica's bucket buffers take (two buffers of every
  //! replica's block, two of its own), for the model-state formula.
  [[nodiscard]] std::size_t buffer_floats(std::size_t p) const noexcept { return 2 * (p + 1) * largest_; }
  //! Stage 3's: two packed gathers and two windows of a bucket's layers.
  [[nodiscard]] std::size_t gather_floats(std::size_t p) const noexcept { return 2 * (p * largest_ + span_); }
  //! What the buckets add to one replica's model state at `stage` (2 or 3;
  //! model_state_bytes' `buckets`): their buffers and a block's slack (read
  //! past the last slice); at stage 3 also the gathers' buffers and windows,
  //! less the per-layer value window pair (`pair` floats) they replace. 0 when off.
  [[nodiscard]] std::size_t state_floats(int stage, std::size_t p, std::size_t pair) const noexcept {
    if (!on()) return 0;
    const std::size_t more = buffer_floats(p) + largest_;
    return stage == 3 ? more + gather_floats(p) - pair : more;
  }

  //! Unit u's gradient `grad` (the whole unit, memory `m`) into its bucket's
  //! buffer `buf` (replicas() blocks): each replica's slice to its place.
  void pack(kernels::Memory& m, const ShardLayout& L, std::size_t u, const float* grad, float* buf) const {
    const ShardBucket& b = buckets_[of_unit_.at(u)];
    for (std::size_t q = 0; q < L.replicas(); ++q) {
      const Range s = L.slice(u, q);
      if (s.size()) m.copy(buf + place(L, b, u, q), grad + s.begin, s.size() * sizeof(float));
    }
  }
  //! Bucket k's gathered buffer `buf` (every replica's block) into `values`,
  //! which holds the flat layout from element `from` on (the whole vector, or
  //! a window of the bucket's layers: from = their first element).
  void unpack(kernels::Memory& m, const ShardLayout& L, std::size_t k, const float* buf, float* values,
              std::size_t from = 0) const {
    const ShardBucket& b = buckets_[k];
    for (std::size_t q = 0; q < L.replicas(); ++q)
      for (std::size_t u = b.ua; u < b.ub; ++u) {
        const Range s = L.slice(u, q);
        if (s.size())
          m.copy(values + (L.units()[u].begin + s.begin - from), buf + place(L, b, u, q), s.size() * sizeof(float));
      }
  }

 private:
  //! Where replica q's slice of unit u lies in bucket b's buffer: q's block, after q's slices of the units before u.
  [[nodiscard]] static std::size_t place(const ShardLayout& L, const ShardBucket& b, std::size_t u, std::size_t q) {
    return q * b.block + (L.owned_at(u, q) - L.owned_at(b.ua, q));
  }

  std::vector<ShardBucket> buckets_;
  std::vector<std::size_t> of_unit_;
  std::size_t largest_ = 0, span_ = 0;
};

}  // namespace strata::detail
