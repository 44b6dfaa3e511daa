#pragma once
//! Tensor parallelism's seam (Megatron-LM's): a layer split over the T
//! replicas of a tensor-parallel group holds a shard of its parameters and
//! sums partial results with the group's all-reduce (TensorGroup), which a
//! replica's step reaches through StepInfo::tensor_group; the model says
//! which elements of its flat parameter layout each replica holds
//! (TensorSegment, ModelProgram::tensor_layout), so that the executor can
//! place a logical value into shards and join them back
//! (parallel/tensor/tensor_parallel_executor.hpp).
//!   struct MyGroup : strata::TensorGroup { void all_reduce_sum(kernels::Compute& c, float* x, std::size_t n) override; ... };
//! Deterministic: every member sums the members' buffers in member order,
//! so every member holds the same bits.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/kernels/compute.hpp>

namespace strata {

//! The replicas that hold one copy of a model split by tensor parallelism.
class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  //! This replica's place in the group, 0 .. size() - 1.
  [[nodiscard]] virtual int rank() const noexcept = 0;
  [[nodiscard]] virtual int size() const noexcept = 0;
  //! x[0, n) (in `c`'s memory) becomes the sum over the group's members of
  //! theirs, added in member order: the same bits on every member. Every
  //! member calls it with the same n, in the same order of calls; one that
  //! never comes raises a CollectiveTimeout naming it, within the deadline.
  virtual void all_reduce_sum(kernels::Compute& c, float* x, std::size_t n) = 0;
};

//! A run of a replica's parameters in the model's flat layout: `length`
//! elements from `offset`; `replicated`: every member of the group holds
//! these same elements (a layer or a part of one that is not split), else
//! this member alone does.
struct TensorSegment {
  std::size_t offset = 0;
  std::size_t length = 0;
  bool replicated = false;
  friend bool operator==(const TensorSegment&, const TensorSegment&) = default;
};

//! How a split layer divides its work and parameters over a group.
enum class TensorRole {
  Replicated,  //!< every member holds and runs the whole layer
  Column,      //!< Dense: its output units split (Megatron's column-parallel: the input's gradient summed)
  Row,         //!< Dense: its input split (row-parallel: the output summed, then the bias and activation)
  Heads,       //!< MultiHeadAttention: its heads split (column-parallel q, k, v; row-parallel output)
};

//! The elements of segments `segs` (in order) gathered from the flat
//! `logical` vector into `local` (their lengths summed), or scattered back
//! (`to_logical`; `replicated` segments only when `with_replicated`).
inline void move_segments(std::span<const TensorSegment> segs, std::span<float> logical, std::span<float> local,
                          bool to_logical, bool with_replicated = true) {
  std::size_t at = 0;
  for (const TensorSegment& s : segs) {
    if (s.offset + s.length > logical.size() || at + s.length > local.size())
      throw Error("tensor parallelism: a segment [" + std::to_string(s.offset) + ", " +
                  std::to_string(s.offset + s.length) + ") lies outside the " + std::to_string(logical.size()) +
                  " parameters (an internal error)");
    if (!to_logical) std::copy_n(logical.data() + s.offset, s.length, local.data() + at);
    else if (with_replicated || !s.replicated) std::copy_n(local.data() + at, s.length, logical.data() + s.offset);
    at += s.length;
  }
}

//! The elements segments `segs` hold in all.
inline std::size_t segments_size(std::span<const TensorSegment> segs) {
  std::size_t n = 0;
  for (const TensorSegment& s : segs) n += s.length;
  return n;
}

}  // namespace strata
