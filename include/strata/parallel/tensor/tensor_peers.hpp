#pragma once
//! How the replicas of tensor parallelism sum over their peers
//! (parallel/tensor/tensor_parallel_executor.hpp): peer_sum, an all-reduce of a
//! list of replicas over their tagged send / recv that adds the buffers in
//! the list's order (the same bits on every member, run to run), and
//! PeerTensorGroup, a copy's members as the TensorGroup its split layers
//! sum through. A copy's members are replicas of one process: they reach
//! each other over the replica context (MirroredStrategy) or the worker's
//! local communicator (MultiWorkerMirroredStrategy): tensor_link.
//!   detail::peer_sum(ctx, members, me, tag, x, n, scratch);   // every member alike

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/parallel/zero/logical_slices.hpp>
#include <strata/device/tensor_group.hpp>

namespace strata::detail {

//! Tags of the executor's point-to-point sums (apart from any a program uses).
inline constexpr int tensor_group_tag = 0x7e50;  //!< a copy's members, inside forward and backward
inline constexpr int data_group_tag = 0x7e51;    //!< a member's gradient with its peers of the other copies

//! x[0, n) (host memory) becomes the sum over replicas `members` (their
//! ids on `ctx`; this replica is members[me]) of theirs, added in member
//! order, over `ctx`'s send / recv with `tag`: the same bits on every
//! member. `in`: scratch for the received buffers. Elements of 16 bits
//! (bf16, fp16: a compressed gradient) travel as they are and are added in
//! FP32, rounded to 16 bits once per element (as a direct all-reduce of them).
template <class Ctx, class T>
void peer_sum(Ctx& ctx, std::span<const int> members, std::size_t me, int tag, T* x, std::size_t n,
              std::vector<T>& in) {
  const std::size_t m = members.size();
  if (m <= 1 || n == 0) return;
  for (std::size_t k = 0; k < m; ++k)
    if (k != me) ctx.send(std::span<const T>(x, n), members[k], tag);
  in.resize(m * n);
  for (std::size_t k = 0; k < m; ++k)
    if (k != me) ctx.recv(std::span<T>(in.data() + k * n, n), members[k], tag);
    else std::copy_n(x, n, in.data() + k * n);
  if constexpr (std::is_same_v<T, float>) {
    std::copy_n(in.data(), n, x);
    for (std::size_t k = 1; k < m; ++k) {
      const float* y = in.data() + k * n;
      for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      float acc = static_cast<float>(in[i]);
      for (std::size_t k = 1; k < m; ++k) acc += static_cast<float>(in[k * n + i]);
      x[i] = T(acc);
    }
  }
}

//! Where a replica reaches the other members of its copy by send / recv:
//! its context in one process, its worker's local communicator across
//! workers (a copy's members are replicas of one worker).
template <class Ctx>
auto& tensor_link(Ctx& ctx) noexcept {
  if constexpr (requires { ctx.local_communicator(); }) return ctx.local_communicator();
  else return ctx;
}
template <class Ctx>
using tensor_link_t = std::remove_reference_t<decltype(tensor_link(std::declval<Ctx&>()))>;

//! A copy's members as one replica sees them (their ids on `Link`).
template <class Link>
class PeerTensorGroup final : public TensorGroup {
 public:
  PeerTensorGroup(std::vector<int> members, std::size_t me) : members_(std::move(members)), me_(me) {}
  void bind(Link& link) noexcept { ctx_ = &link; }
  [[nodiscard]] int rank() const noexcept override { return static_cast<int>(me_); }
  [[nodiscard]] int size() const noexcept override { return static_cast<int>(members_.size()); }
  void all_reduce_sum(kernels::Compute& c, float* x, std::size_t n) override {
    if (!ctx_) throw Error("tensor parallelism: a split layer ran outside its executor's step (no group bound)");
    if (c.where() == kernels::Where::Host) return peer_sum(*ctx_, members_, me_, tensor_group_tag, x, n, in_);
    host_.resize(n);  // a GPU's buffer through host memory
    c.download(host_.data(), x, n * sizeof(float));
    peer_sum(*ctx_, members_, me_, tensor_group_tag, host_.data(), n, in_);
    c.upload(x, host_.data(), n * sizeof(float));
  }

 private:
  std::vector<int> members_;
  std::size_t me_ = 0;
  Link* ctx_ = nullptr;
  std::vector<float> in_, host_;
};

//! Gradient buckets over the logical gradient of a member whose own
//! gradient is in its layout (`segs`: tensor parallelism's shards): as
//! backward tells each range of its own gradient final, that range goes to
//! its places in the logical vector (the replicated parameters only when
//! the member adds them), and the logical elements above every own element
//! not yet final (the others' places are zeros, final from the start) are
//! told to the logical vector's GradientBuckets, which start each bucket's
//! all-reduce as it becomes whole. Whatever order the segments lie in, a
//! bucket starts only once every own element it holds is final.
//! A GPU replica's own gradient is fetched into host memory (`fetch(b, e)`:
//! own [b, e) into `own`) as each range is told, before it is placed.
//!   lb.begin(segs, with_replicated, own_grad, logical, &plan, start, done);  ... backward tells lb ...;  lb.finish();
class LogicalBuckets final : public GradientReady {
 public:
  using Fetch = std::function<void(std::size_t, std::size_t)>;
  void begin(std::span<const TensorSegment> segs, bool with_replicated, std::span<const float> own,
             std::span<float> logical, const std::vector<Range>* plan, GradientBuckets::Start start,
             GradientBuckets::Done done, Fetch fetch = {}) {
    fetch_ = std::move(fetch);
    segs_ = segs;
    rep_ = with_replicated;
    own_ = own;
    logical_ = logical;
    own_from_ = own.size();
    logical_from_ = logical.size();
    in_order_ = true;
    // below_[i]: the end of the highest logical place of segments 0..i-1 (what an own position in segment i waits on)
    below_.assign(segs.size() + 1, 0);
    for (std::size_t i = 0; i < segs.size(); ++i)
      below_[i + 1] = std::max(below_[i], segs[i].length ? segs[i].offset + segs[i].length : 0);
    buckets_.begin(plan, logical, std::move(start), std::move(done));
  }
  [[nodiscard]] bool active() const noexcept { return buckets_.active(); }

  //! Own [begin, end) is final (from the end down, as GradientBuckets takes them; out of order: the rest at finish).
  void ready(std::size_t begin, std::size_t end) override {
    if (!in_order_ || !buckets_.active()) return;
    if (end != own_from_ || begin > end) {
      in_order_ = false;
      return;
    }
    place(begin, end);
    own_from_ = begin;
    const std::size_t low = frontier(begin);
    if (low < logical_from_) {
      buckets_.ready(low, logical_from_);
      logical_from_ = low;
    }
  }
  //! After the step: the own elements not told go to their places, the
  //! remaining buckets start, and every one is waited for (and expanded).
  void finish() {
    place(0, own_from_);
    own_from_ = 0;
    buckets_.finish();
  }
  void drop() noexcept { buckets_.drop(); }

 private:
  //! Own [b, e) to its logical places (fetched first where it lives on a device).
  void place(std::size_t b, std::size_t e) {
    if (fetch_ && b < e) fetch_(b, e);
    std::size_t at = 0;
    for (const TensorSegment& s : segs_) {
      const std::size_t lo = std::max(at, b), hi = std::min(at + s.length, e);
      if (lo < hi && (rep_ || !s.replicated))
        std::copy(own_.begin() + static_cast<std::ptrdiff_t>(lo), own_.begin() + static_cast<std::ptrdiff_t>(hi),
                  logical_.begin() + static_cast<std::ptrdiff_t>(s.offset + (lo - at)));
      at += s.length;
    }
  }
  //! The lowest logical place from which everything is final once own [b, end) is: above the places
  //! of every own element before b.
  [[nodiscard]] std::size_t frontier(std::size_t b) const {
    std::size_t at = 0;
    for (std::size_t i = 0; i < segs_.size(); ++i) {
      if (b < at + segs_[i].length) return std::max(below_[i], b > at ? segs_[i].offset + (b - at) : 0);
      at += segs_[i].length;
    }
    return below_.back();
  }

  std::span<const TensorSegment> segs_;
  bool rep_ = true;
  std::span<const float> own_;
  std::span<float> logical_;
  std::vector<std::size_t> below_;
  std::size_t own_from_ = 0, logical_from_ = 0;
  bool in_order_ = true;
  Fetch fetch_;
  GradientBuckets buckets_;
};

//! One member's gradient summed with the same member of the other copies
//! (the data-parallel sum of tensor parallelism), compressed or not: in one
//! process a peer sum in copy order over its copies' members; across
//! workers one hierarchical all-reduce of the logical gradient, each member
//! putting its part at its place (member 0 the replicated parameters) and
//! zeros elsewhere, so each element has one order of additions whatever
//! member holds it. Compressed (compression.hpp), the 16-bit values travel;
//! the zeros round to themselves and keep no residual.
class CopiesSum {
 public:
  //! At place time: the format, and the length compressed (a member's elements, or across workers the logical n).
  void place(Compression c, std::size_t n) { comp_.place(c, n); }
  //! The residual back to zero (optimizer reset, state set).
  void reset() noexcept { comp_.reset(); }
  //! The step is applied: its residual becomes the one the next step adds.
  void commit() noexcept { comp_.commit(); }
  //! A logical vector of n floats to use as scratch (the sharded update's).
  std::vector<float>& logical(std::size_t n) {
    in_.assign(n, 0.f);
    return in_;
  }
  //! The sharded update's reduction (ZeRO 1): this replica's `slice` of the
  //! sum over every replica of `all` (logical: each member's part at its
  //! place, zeros elsewhere), reduce-scattered in 16 bits when compressed.
  template <SlicingContext Ctx>
  void scattered(Ctx& ctx, std::span<const float> all, std::span<float> slice) {
    if (comp_.on()) comp_.scattered(all, slice, [&](auto w, auto s) { slices_reduce(ctx, w, s); });
    else slices_reduce(ctx, all, slice);
  }

  //! `hg` (member `t`'s gradient on the host, in layout `segs`) becomes its
  //! sum over the copies: `peers` (this one peers[copy]) over `link` in one
  //! process (`across` false), else the all-reduce of `ctx` over n logical elements.
  template <class Ctx, class Link>
  void sum(Ctx& ctx, Link& link, std::span<const int> peers, std::size_t copy, bool across,
           std::span<const TensorSegment> segs, std::size_t t, std::size_t n, std::span<float> hg) {
    if (!across) {
      if (comp_.on())  // in 16 bits (one copy: rounded alike, as it would travel)
        comp_.through_wire(hg, [&](auto w) {
          peer_sum(link, peers, copy, data_group_tag, w.data(), hg.size(), scratch(w));
        });
      else
        peer_sum(link, peers, copy, data_group_tag, hg.data(), hg.size(), in_);
      return;
    }
    in_.assign(n, 0.f);
    move_segments(segs, in_, hg, true, t == 0);
    comp_.all_reduce(ctx, std::span<float>(in_));
    move_segments(segs, in_, hg, false);
  }

  //! By buckets (ExecutorOptions::bucket_bytes, `plan` over the n logical
  //! elements): before the step, the logical gradient zeroed and its
  //! buckets ready to start over `ctx`'s all-reduce without waiting (in 16
  //! bits when compressed, placed for n) as backward tells the member's
  //! gradient `g` (host memory, layout `segs`; a GPU's: filled by `fetch`) final. Every replica of the
  //! job sums every logical element, each member adding its places (member
  //! 0 the replicated ones): with a reduction in replica order the flat
  //! sum's bits. Returns what backward tells.
  template <class Ctx>
  GradientReady* begin_buckets(Ctx& ctx, const std::vector<Range>* plan, std::span<const TensorSegment> segs,
                               std::size_t t, std::span<const float> g, std::size_t n,
                               LogicalBuckets::Fetch fetch = {}) {
    in_.assign(n, 0.f);
    const std::span<float> all(in_);
    buckets_.begin(segs, t == 0, g, all, plan, comp_.bucket_start(ctx, all), comp_.bucket_done(all), std::move(fetch));
    return &buckets_;
  }
  [[nodiscard]] bool buckets_active() const noexcept { return buckets_.active(); }
  //! After the step: every bucket summed, `hg` (layout `segs`) takes its part of the sum.
  void finish_buckets(std::span<const TensorSegment> segs, std::span<float> hg) {
    buckets_.finish();
    move_segments(segs, in_, hg, false);
  }
  //! After a failed step: what is in flight is forgotten.
  void drop() noexcept { buckets_.drop(); }

 private:
  template <class W>
  auto& scratch(W) {
    if constexpr (std::is_same_v<typename W::element_type, bf16>) return bf_;
    else return fp_;
  }

  GradientCompression comp_;
  LogicalBuckets buckets_;
  std::vector<float> in_;  // the received buffers, or the logical gradient
  std::vector<bf16> bf_;   // the received buffers, compressed
  std::vector<fp16> fp_;
};

}  // namespace strata::detail
