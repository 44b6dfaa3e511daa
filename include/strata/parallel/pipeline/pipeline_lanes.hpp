#pragma once
//! The lanes of a pipeline that run in this process, as the pipeline
//! executor (pipeline_executor.hpp) holds them: lane (copy d, stage s,
//! member t) with its compute, its part of the variables and of the
//! gradient, its stage program and, with tensor parallelism (T > 1), its
//! stage's group; and the logical value they join into. What a lane holds
//! of the flat variables is a list of segments (segs[s * T + t]): its
//! stage's slice when T = 1; its member's elements of the stage's layers
//! otherwise (the model's tensor layout for the stages: a split layer's
//! shard, the other layers whole). A CPU lane of T = 1 views the logical
//! value in place; a GPU lane, or a member (T > 1), holds its part in
//! buffers of its own (a CPU member's other copies view copy 0's), read
//! back into the logical value when it is asked for (`stale`) and written
//! from it when it is assigned.
//!   PipelineLanes<Link> ln;  ln.reset(D, S, T, copies, stages, members, device_of, matmul);
//!   ln.layout(program, ranges, slices);  ...  ln.read_back();  use(ln.value);

#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <strata/core/partition.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/host/maps.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/device/device.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/parallel/pipeline/pipeline_stage.hpp>
#include <strata/execution/program.hpp>
#include <strata/device/tensor_group.hpp>
#include <strata/parallel/tensor/tensor_peers.hpp>

namespace strata::detail {

template <class Link>
class PipelineLanes {
 public:
  std::size_t T = 1;                   //!< members per stage (tensor parallelism)
  Range copies, here, members;         //!< the copies, stages and members whose lanes run here
  bool gpu = false;                    //!< the lanes here run on GPUs
  bool own = false;                    //!< lanes hold their variables in buffers of their own (GPU, T > 1)
  mutable Tensor<float> value;         //!< the logical variables (lanes with their own buffers: read back when stale)
  mutable bool stale = false;          //!< lanes with their own buffers trained since `value` was read back
  std::vector<std::vector<TensorSegment>> segs;  //!< [s * T + t]: what the lane holds of `value`
  // (declared in this order: the lanes' programs use the groups and the computes' memory, and go first)
  std::vector<std::vector<std::unique_ptr<kernels::Compute>>> computes;  //!< [copy][s * T + t]: GPU lanes'
  std::vector<std::vector<std::unique_ptr<PeerTensorGroup<Link>>>> groups;  //!< [copy][s * T + t]: T > 1
  std::vector<std::vector<StageLane>> lanes;                             //!< [copy][s * T + t], the lanes here

  ~PipelineLanes() { lanes.clear(); }

  //! f(s, t) for every stage and member here.
  template <class F>
  void for_here(F&& f) const {
    for (std::size_t s = here.begin; s < here.end; ++s)
      for (std::size_t t = members.begin; t < members.end; ++t) f(s, t);
  }

  //! D copies of S stages of T members, of which copies x stages x members
  //! run here; lane (d, s, t) on device_of(d, s, t) (GPUs: a compute each).
  template <class DeviceOf>
  void reset(std::size_t D, std::size_t S, std::size_t t_count, Range copies_here, Range stages_here,
             Range members_here, DeviceOf&& device_of, MatmulPrecision matmul) {
    lanes.clear();
    groups.clear();
    computes.clear();
    T = t_count, copies = copies_here, here = stages_here, members = members_here;
    gpu = device_of(copies.begin, here.begin, members.begin).is_gpu();
    own = gpu || T > 1;
    lanes.resize(D);
    groups.resize(D);
    computes.resize(D);
    for (std::size_t d = copies.begin; d < copies.end; ++d) {
      lanes[d].resize(S * T);
      groups[d].resize(S * T);
      computes[d].resize(S * T);
      for_here([&](std::size_t s, std::size_t t) {
        if (gpu) computes[d][s * T + t] = make_compute(device_of(d, s, t), matmul);
      });
    }
  }

  //! Makes the lanes here for stages `ranges` (their parameters `slices`):
  //! for every copy here, each stage (a member's shard of it, T > 1) over
  //! its part of the variables and a gradient of its own; then the lanes
  //! with buffers of their own take their part of `value`.
  void layout(ModelProgram& program, const std::vector<Range>& ranges, const std::vector<Range>& slices) {
    plan_segments(program, ranges, slices);
    for (std::size_t d = copies.begin; d < copies.end; ++d)
      for_here([&](std::size_t s, std::size_t t) {
        const std::size_t j = s * T + t, n = segments_size(segs[j]);
        StageLane& L = lanes[d][j];
        L.stage.reset();
        L.c = computes[d][j].get();
        L.m = L.c ? static_cast<kernels::Memory*>(L.c) : &kernels::host_memory();
        const BoundThread bound(*L.m);
        L.borrowed = !L.c && (T == 1 || d != copies.begin);
        if (!L.borrowed) L.value.resize(*L.m, Shape{n});
        else if (T == 1) L.value = kernels::Buffer<float>::borrow(*L.m, value.data() + slices[s].begin, Shape{n});
        else L.value = kernels::Buffer<float>::borrow(*L.m, lanes[copies.begin][j].value.data(), Shape{n});
        L.grad.resize(*L.m, Shape{n});
        L.m->fill(L.grad.data(), 0.f, n);
        if (L.c) L.bad.resize(*L.m, Shape{1});
        if (T == 1) {
          L.stage = L.c ? program.make_stage_on(*L.c, ranges[s], L.values(), L.gradient())
                        : program.make_stage(ranges[s], L.values(), L.gradient());
          return;
        }
        std::vector<int> ids;  // the lanes of this copy's stage s
        for (std::size_t u = 0; u < T; ++u) ids.push_back(static_cast<int>((d * ranges.size() + s) * T + u));
        groups[d][j] = std::make_unique<PeerTensorGroup<Link>>(std::move(ids), t);
        L.stage = program.make_tensor_stage_on(L.c, ranges, s, static_cast<int>(t), static_cast<int>(T),
                                               *groups[d][j], L.values(), L.gradient());
      });
    if (own) upload(copies.begin);
  }

  //! `value` takes the variables of the lanes here (copy 0's), when they trained since it was read.
  void read_back() const {
    if (!stale) return;
    std::vector<float> mine;
    for_here([&](std::size_t s, std::size_t t) {
      const StageLane& L = lanes[copies.begin][s * T + t];
      const BoundThread bound(*L.m);
      mine.resize(L.value.size());
      if (!mine.empty()) L.m->download(mine.data(), L.value.data(), mine.size() * sizeof(float));
      move_segments(segs[s * T + t], value.span(), mine, true);
    });
    stale = false;
  }
  //! Lanes with buffers of their own, copies [from, end) here: their variables from `value`.
  void upload(std::size_t from) {
    std::vector<float> mine;
    for (std::size_t d = from; d < copies.end; ++d)
      for_here([&](std::size_t s, std::size_t t) {
        StageLane& L = lanes[d][s * T + t];
        if (L.borrowed || !L.value.size()) return;
        const BoundThread bound(*L.m);
        mine.resize(L.value.size());
        move_segments(segs[s * T + t], value.span(), mine, false);
        L.m->upload(L.value.data(), mine.data(), mine.size() * sizeof(float));
      });
  }

  //! Compression (ExecutorOptions::compression): every lane here compresses
  //! its gradient with a residual of its own (none: off), zeroed here.
  void place_compression(Compression c) {
    for (std::size_t d = copies.begin; d < copies.end; ++d)
      for_here([&](std::size_t s, std::size_t t) { lanes[d][s * T + t].comp.place(c, lanes[d][s * T + t].grad.size()); });
  }
  //! Lane j of copy d (the lowest here) adds the copies here's gradients
  //! to its own `hg` (host memory) in copy order (the same sum on every
  //! run), then `across(hg)` sums that with the copies elsewhere.
  template <class Across>
  void sum_copies(std::size_t d, std::size_t j, std::span<float> hg, Across&& across) {
    for (std::size_t c = d + 1; c < copies.end; ++c) {
      const float* o = gpu ? lanes[c][j].host.data() : lanes[c][j].grad.data();
      for (std::size_t i = 0; i < hg.size(); ++i) hg[i] += o[i];
    }
    across(hg);
  }
  //! Lane j of copy d (the lowest here; every copy here compressed its
  //! gradient) sums the copies here's 16-bit gradients in copy order (in
  //! FP32, rounded once), `across(w)` sums that with the copies elsewhere
  //! (16 bits), and `hg` (its gradient on the host) becomes the sum in FP32.
  template <class Across>
  void sum_compressed(std::size_t d, std::size_t j, std::span<float> hg, Across&& across) {
    std::vector<const GradientCompression*> others;
    for (std::size_t c = d + 1; c < copies.end; ++c) others.push_back(&lanes[c][j].comp);
    GradientCompression& comp = lanes[d][j].comp;
    comp.sum_wires(others, hg.size());
    comp.with_wire([&](auto w) { across(w.first(hg.size())); });
    comp.expand(hg, 0);
  }

  //! The non-finite values lane j counts of its gradient `hg` (host memory).
  [[nodiscard]] double nonfinite(std::size_t j, std::span<const float> hg) const {
    return counted_sum(j, hg, [](std::span<const float> x) {
      return static_cast<double>(kernels::host::count_nonfinite(x.data(), x.size()));
    });
  }
  //! The sum of f over the parts of lane j's gradient `x` (host memory) it
  //! counts: all of it (T = 1), else its member's own elements and, member
  //! 0, the replicated ones (each element of the model once over a copy).
  template <class F>
  double counted_sum(std::size_t j, std::span<const float> x, F&& f) const {
    if (T == 1) return f(x);
    double v = 0;
    std::size_t at = 0;
    for (const TensorSegment& g : segs[j]) {
      if (!g.replicated || j % T == 0) v += f(x.subspan(at, g.length));
      at += g.length;
    }
    return v;
  }

 private:
  //! What lane (s, t) holds of the logical variables: its stage's slice
  //! (T = 1), or its member's elements of the stage's layers.
  void plan_segments(ModelProgram& program, const std::vector<Range>& ranges, const std::vector<Range>& slices) {
    const std::size_t S = ranges.size();
    segs.assign(S * T, {});
    if (T == 1) {
      for (std::size_t s = 0; s < S; ++s) segs[s] = {TensorSegment{slices[s].begin, slices[s].size(), false}};
      return;
    }
    for (std::size_t t = 0; t < T; ++t)
      for (const TensorSegment& g : program.tensor_layout(static_cast<int>(t), static_cast<int>(T), ranges)) {
        std::size_t s = 0;
        while (s + 1 < S && g.offset >= slices[s].end) ++s;
        if (g.length) segs[s * T + t].push_back(g);
      }
  }
};

}  // namespace strata::detail
