#pragma once
//! Gradient compression on the wire (ExecutorOptions::compression, as DDP's
//! bf16/fp16 hooks, with error feedback): each replica adds the residual of
//! its last applied step to its gradient, rounds that to 16 bits
//! (core/half.hpp), keeps what rounding lost as its next residual, sums the
//! 16-bit values (in FP32 per element: half an FP32 all-reduce's bytes) and
//! expands the sum into its FP32 gradient. GradientCompression serves the
//! flat and bucketed all-reduce and the copies' sums of tensor parallelism
//! and pipelines; CompressedSlices ZeRO 1's reduce-scatter;
//! ShardedCompression ZeRO 2/3's per-layer reduce-scatters; WireSpace
//! rounds on the host or a GPU.
//! Deterministic, not FP32's bits; the residual is not in checkpoints
//! (gradient/README.md says what that means for a resumed run).
//!   detail::GradientCompression c;  c.place(Compression::BF16, n);
//!   c.all_reduce(ctx, grad);  if (finite) { c.commit(); update(); }

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/error.hpp>
#include <strata/core/half.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/kernels/host/maps.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/gradient/compression_format.hpp>

namespace strata {

namespace detail {

//! out[i] = round(g[i] + res[i]) in 16 bits (T: bf16 or fp16), next[i] =
//! what the rounding lost (0 where the rounded value is not finite: an
//! overflow or a NaN, whose step the finiteness check skips). `next` may be
//! `res` (the residual updated in place). The host's loop over the body the
//! computes' round_to_wire runs (kernels/bodies/maps.hpp).
template <class T>
void round_with_residual(std::span<const float> g, const float* res, float* next, T* out) {
  kernels::host::round_with_residual(g.data(), res, next, out, g.size());
}

//! What GPU replicas' summary (collectives_choice) adds to their collectives'
//! choice: the update sharded over `sharded` replicas (0: not; `staged`:
//! every worker's, through host memory), central variables, compression.
inline std::string gpu_update_words(std::size_t sharded, bool staged, bool central, Compression c) {
  std::string out;
  const std::string part = "1/" + std::to_string(sharded);
  if (sharded && !staged)
    out += "; the update sharded over the replicas (reduce-scatter, each updates its " + part + " slice with its " +
           part + " of the optimizer state, all-gather)";
  if (sharded && staged)
    out += "; the update sharded over every worker's " + std::to_string(sharded) + " replicas (each updates its " +
           part + " slice; the gradient and the values staged through host memory to the replica context's "
           "reduce-scatter and all-gather)";
  if (central)
    out += "; the variables and the update on replica 0's device (central storage), its values sent to the other "
           "replicas' devices each step";
  if (c != Compression::None)
    out += "; the gradient sent in " + std::string(to_string(c)) +
           " (rounded on each GPU with error feedback, summed in FP32 and rounded once per step of the sum)";
  return out;
}

//! Where a replica's compression buffers live and what rounds and expands
//! them: the host (no compute), or a GPU replica's compute (its memory, its
//! round_to_wire and expand_wire: the same bits).
class WireSpace {
 public:
  WireSpace() = default;
  explicit WireSpace(kernels::Compute* dev) : dev_(dev) {}
  [[nodiscard]] kernels::Memory& mem() const {
    if (dev_) return *dev_;
    return kernels::host_memory();
  }
  [[nodiscard]] bool on_device() const noexcept { return dev_ != nullptr; }
  //! out = round(g + res) in T, next = what the rounding lost (next may be res).
  template <class T>
  void round(std::span<const float> g, const float* res, float* next, T* out) const {
    if (dev_) return dev_->round_to_wire(wire_format_of<T>, g.data(), res, next, out, g.size());
    round_with_residual(g, res, next, out);
  }
  //! g = the T elements at `w` in FP32.
  template <class T>
  void expand(const T* w, std::span<float> g) const {
    if (dev_) return dev_->expand_wire(wire_format_of<T>, w, g.data(), g.size());
    kernels::host::expand_wire(wire_format_of<T>, w, g.data(), g.size());
  }
  //! x = 0 (n floats).
  void zero(float* x, std::size_t n) const {
    if (n) mem().fill(x, 0.f, n);
  }

 private:
  kernels::Compute* dev_ = nullptr;
};

//! One replica's compression state: its residual (error feedback), the one
//! about to replace it, and the 16-bit copy of its gradient that travels, in
//! the memory of the replica's space: the host's, or a GPU's (place with its
//! compute: the rounding and expansion are its round_to_wire and
//! expand_wire, the same bits; the 16-bit sums its device collectives').
class GradientCompression {
 public:
  // (first: members defined below call them, and their return types are deduced)
  //! f(the 16-bit buffer, as a span of its type: bf16 or fp16): what
  //! compress wrote and a sum reads (on only). Memory of the replica's space.
  template <class F>
  decltype(auto) with_wire(F&& f) {
    if (c_ == Compression::BF16) return f(std::span<bf16>(bf_.data(), bf_.size()));
    return f(std::span<fp16>(fp_.data(), fp_.size()));
  }
  template <class F>
  decltype(auto) with_wire(F&& f) const {
    if (c_ == Compression::BF16) return f(std::span<const bf16>(bf_.data(), bf_.size()));
    return f(std::span<const fp16>(fp_.data(), fp_.size()));
  }

  //! At place time: the format and the gradient's length; residual zero. On the host, or in `dev`'s
  //! memory, rounded and expanded by `dev` (a GPU replica's compute).
  void place(Compression c, std::size_t n, kernels::Compute* dev = nullptr) {
    c_ = c;
    space_ = WireSpace(dev);
    const std::size_t m = on() ? n : 0;
    kernels::Memory& mem = space_.mem();
    residual_.resize(mem, Shape{m});
    next_.resize(mem, Shape{m});
    bf_.resize(mem, Shape{c_ == Compression::BF16 ? m : 0});
    fp_.resize(mem, Shape{c_ == Compression::FP16 ? m : 0});
    reset();
  }
  //! The residual back to zero (optimizer reset, state set).
  void reset() {
    if (!on()) return;
    space_.zero(residual_.data(), residual_.size());
    space_.zero(next_.data(), next_.size());
  }
  [[nodiscard]] bool on() const noexcept { return c_ != Compression::None; }
  //! This replica's residual (what its last applied step's rounding dropped; memory of its space).
  [[nodiscard]] std::span<const float> residual() const noexcept { return {residual_.data(), residual_.size()}; }

  //! Elements [at, at + g.size()) of the gradient `g` are: v = g + residual,
  //! sent as round(v), the next residual v - round(v) (0 where round(v) is
  //! not finite: an overflow or a NaN, whose step the finiteness check skips).
  void compress(std::span<const float> g, std::size_t at) {
    with_wire([&](auto w) { space_.round(g, residual_.data() + at, next_.data() + at, w.data() + at); });
  }
  //! g = the reduced 16-bit values of [at, at + g.size()), in FP32.
  void expand(std::span<float> g, std::size_t at) const {
    with_wire([&](auto w) { space_.expand(w.data() + at, g); });
  }
  //! The step is applied: its residual becomes the one the next step adds.
  void commit() noexcept {
    if (on()) std::swap(residual_, next_);
  }

  //! The reduction of the whole gradient `g` through 16 bits (on only):
  //! compressed, `sum(w)` sums its 16-bit copy `w` (a span of bf16 or fp16,
  //! g.size() long) in place over the replicas, and `g` becomes the result
  //! in FP32. Any sum that adds in FP32 and rounds to 16 bits (a collective,
  //! tensor parallelism's peer sum).
  //!   comp.through_wire(g, [&](auto w) { coll.all_reduce(w, strata::Sum); });
  template <class SumFn>
  void through_wire(std::span<float> g, SumFn&& sum) {
    compress(g, 0);
    with_wire([&](auto w) { sum(w.first(g.size())); });
    expand(g, 0);
  }

  //! Elements [0, n) of this 16-bit buffer become the sum of it and the
  //! buffers of `others` (each compressed alike), added in FP32 in that
  //! order and rounded once: a sum over copies in memory, as the direct
  //! all-reduce adds them (the pipeline's copies in one process).
  void sum_wires(std::span<const GradientCompression* const> others, std::size_t n) {
    if (space_.on_device()) throw Error("strata: gradient compression: sum_wires adds copies in host memory");
    with_wire([&](auto w) {
      using T = typename decltype(w)::element_type;
      std::vector<const T*> in;
      for (const GradientCompression* o : others)
        o->with_wire([&](auto x) {
          if constexpr (std::is_same_v<typename decltype(x)::element_type, const T>) in.push_back(x.data());
        });
      if (in.size() != others.size()) throw Error("strata: gradient compression: the copies compress in other formats");
      for (std::size_t i = 0; i < n; ++i) {
        float acc = static_cast<float>(w[i]);
        for (const T* x : in) acc += static_cast<float>(x[i]);
        w[i] = T(acc);
      }
    });
  }

  //! The sharded update's reduction (ZeRO 1; on only): the whole gradient
  //! `g` compressed, `scatter(w, s)` reduce-scatters its 16-bit copy `w`
  //! over the replicas into `s` (this replica's slice of the sum, as long
  //! as `slice`, 16 bits), and `slice` becomes that in FP32. The values'
  //! all-gather after the update stays FP32 (the master weights).
  //!   comp.scattered(g, shard, [&](auto w, auto s) { ctx.reduce_scatter(w, s, strata::Sum); });
  template <class ScatterFn>
  void scattered(std::span<const float> g, std::span<float> slice, ScatterFn&& scatter) {
    compress(g, 0);
    with_wire([&](auto w) {
      using T = std::remove_const_t<typename decltype(w)::element_type>;
      kernels::Buffer<T>& s = slice_buffer(T{});
      s.resize(space_.mem(), Shape{slice.size()});
      scatter(std::span<const T>(w.first(g.size())), std::span<T>(s.data(), slice.size()));
      space_.expand(s.data(), slice);
    });
  }

  //! The flat reduction of `g` over `coll` with Sum: in 16 bits when on
  //! (and `coll` takes them: CPU replicas' contexts), else as it is.
  template <class Coll>
  void all_reduce(Coll& coll, std::span<float> g) {
    if constexpr (requires(std::span<bf16> b, std::span<fp16> f) {
                    coll.all_reduce(b, Sum);
                    coll.all_reduce(f, Sum);
                  }) {
      if (on()) return through_wire(g, [&](auto w) { coll.all_reduce(w, Sum); });
    }
    coll.all_reduce(g, Sum);
  }

  //! How a gradient bucket (a view of `grad`) starts its all-reduce through
  //! `ctx` (GradientBuckets::begin's Start): compressed, then its 16-bit copy
  //! all-reduced without waiting; off, the bucket itself.
  template <class Ctx>
  std::function<Work(std::span<float>)> bucket_start(Ctx& ctx, std::span<float> grad) {
    if (!on()) return [&ctx](std::span<float> b) { return ctx.all_reduce_async(b, Sum); };
    return [this, &ctx, base = grad.data()](std::span<float> b) {
      const auto at = static_cast<std::size_t>(b.data() - base);
      compress(b, at);
      return with_wire([&](auto w) { return ctx.all_reduce_async(w.subspan(at, b.size()), Sum); });
    };
  }
  //! What finish does with a bucket once its all-reduce ended: expands it
  //! (none when off).
  std::function<void(std::span<float>)> bucket_done(std::span<float> grad) {
    if (!on()) return {};
    return [this, base = grad.data()](std::span<float> b) { expand(b, static_cast<std::size_t>(b.data() - base)); };
  }

 private:
  kernels::Buffer<bf16>& slice_buffer(bf16) { return bf_slice_; }
  kernels::Buffer<fp16>& slice_buffer(fp16) { return fp_slice_; }

  Compression c_ = Compression::None;
  WireSpace space_;  // the host's, or a GPU replica's memory and compute
  kernels::Buffer<float> residual_, next_;
  kernels::Buffer<bf16> bf_, bf_slice_;  // the 16-bit gradient; the sharded update's slice of its sum
  kernels::Buffer<fp16> fp_, fp_slice_;
};

//! Compression at ZeRO stages 2 and 3 (fully_sharded_executor.hpp), one
//! replica's: as backward ends each layer, its gradient window plus the
//! residual at the layer's place is rounded into a 16-bit window (a pair,
//! as the gradient windows), reduce-scattered in 16 bits into the replica's
//! 16-bit slice and expanded into its FP32 slice once waited for. One
//! residual of the whole gradient, updated in place as each layer is
//! rounded (n floats a replica: what error feedback costs at these stages,
//! counted by the memory budget); a skipped step zeroes it, as a resumed run
//! starts it. The applied steps' residuals are GradientCompression's, so a
//! run without skipped steps gives compressed ZeRO 1's weights bit for bit.
//!   comp.place(Compression::BF16, n, layout.window_pair(), layout.owned(r));
//!   sh.begin_step(gather, [&](const auto& k) {   // a ShardedReplica::ScatterCall
//!     return comp.scatter(ctx, k.begin, k.window, k.in, k.out, k.owned_at); });
class ShardedCompression {
 public:
  //! On the host, or in `dev`'s memory, rounded and expanded by `dev` (a GPU replica's compute).
  void place(Compression c, std::size_t n, std::size_t pair, std::size_t owned, kernels::Compute* dev = nullptr) {
    c_ = c;
    space_ = WireSpace(dev);
    kernels::Memory& mem = space_.mem();
    const bool bf = c == Compression::BF16, fp = c == Compression::FP16;
    residual_.resize(mem, Shape{on() ? n : 0});
    bf_pair_.resize(mem, Shape{bf ? pair : 0});
    bf_owned_.resize(mem, Shape{bf ? owned : 0});
    fp_pair_.resize(mem, Shape{fp ? pair : 0});
    fp_owned_.resize(mem, Shape{fp ? owned : 0});
    reset();
  }
  [[nodiscard]] bool on() const noexcept { return c_ != Compression::None; }
  //! The residual back to zero (a skipped step, an optimizer reset, its state set).
  void reset() { space_.zero(residual_.data(), residual_.size()); }
  [[nodiscard]] std::span<const float> residual() const noexcept { return {residual_.data(), residual_.size()}; }

  //! Starts the unit at `begin` of the flat layout (gradient `in`, in window
  //! `window`) reduce-scattered through 16 bits into `out` (at `owned_at` of
  //! the replica's owned vector) over `ctx`; `out` holds the FP32 sum once
  //! the Work was waited for.
  template <class Ctx>
  Work scatter(Ctx& ctx, std::size_t begin, int window, std::span<const float> in, std::span<float> out,
               std::size_t owned_at) {
    auto go = [&](auto& pair, auto& owned) {
      using T = std::remove_pointer_t<decltype(pair.data())>;
      T* wire = pair.data() + (window == 0 ? 0 : pair.size() - in.size());
      space_.round(in, residual_.data() + begin, residual_.data() + begin, wire);
      const std::span<T> sum(owned.data() + owned_at, out.size());
      Work w = ctx.reduce_scatter_async(std::span<const T>(wire, in.size()), sum, Sum);
      return Work(std::make_unique<FollowedWork>(std::move(w), [space = space_, sum, out] {
        space.expand(sum.data(), out);
      }));
    };
    if (c_ == Compression::BF16) return go(bf_pair_, bf_owned_);
    return go(fp_pair_, fp_owned_);
  }

 private:
  Compression c_ = Compression::None;
  WireSpace space_;
  kernels::Buffer<float> residual_;
  kernels::Buffer<bf16> bf_pair_, bf_owned_;  // the 16-bit window pair; the replica's 16-bit slice of the sums
  kernels::Buffer<fp16> fp_pair_, fp_owned_;
};

//! Collectives `coll` (sharded_update's: fully_sharded.hpp) whose
//! reduce-scatter goes through 16 bits with `comp` (on), the values'
//! all-gather FP32: compressed ZeRO 1.
template <class Coll>
struct CompressedSlices {
  Coll& coll;
  GradientCompression& comp;
  void reduce_scatter(std::span<const float> in, std::span<float> out, SumOp) {
    comp.scattered(in, out, [&](auto w, auto s) { coll.reduce_scatter(w, s, Sum); });
  }
  void all_gather(std::span<const float> in, std::span<float> out) { coll.all_gather(in, out); }
};

}  // namespace detail
}  // namespace strata
