#pragma once
//! Optimizer state kept in slices: each holder (a replica of the sharded
//! update, a pipeline stage) keeps its slice of every slot, while
//! checkpoints read and write the logical state, one whole slot per
//! optimizer slot over all parameters. Written once for the executors that
//! slice it (mirrored_executor.hpp, pipeline_executor.hpp).
//!   auto whole = strata::detail::join_state_slices(n, slices, [&](std::size_t s) { return updater[s]->state(); });
//!   updater[s]->set_state(strata::detail::state_slice(whole, slices[s]));

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/device/tensor_group.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

//! The whole slots of `n` elements each: holder h's slices of each slot
//! (`part(h)`, its elements slices[h]) joined. The first holder's part
//! tells the slot count (none: no state).
template <class Part>
std::vector<Tensor<float>> join_state_slices(std::size_t n, std::span<const Range> slices, Part&& part) {
  std::vector<Tensor<float>> out;
  for (std::size_t h = 0; h < slices.size(); ++h) {
    std::vector<Tensor<float>> mine = part(h);
    if (out.empty())
      for (std::size_t k = 0; k < mine.size(); ++k) out.emplace_back(Shape{n});
    for (std::size_t k = 0; k < mine.size(); ++k)
      std::copy_n(mine[k].data(), mine[k].size(), out[k].data() + slices[h].begin);
  }
  return out;
}

//! The sharded update's optimizer state (mirrored_executor.hpp), whole: the `p` replicas' slices of each
//! slot (`part(r)`, replica r's slice shard_range(n, p, r)) joined.
template <class Part>
std::vector<Tensor<float>> join_state_slices(std::size_t n, std::size_t p, Part&& part) {
  std::vector<Range> slices;
  for (std::size_t r = 0; r < p; ++r) slices.push_back(shard_range(n, p, r));
  return join_state_slices(n, std::span<const Range>(slices), std::forward<Part>(part));
}

//! The whole slots of `n` elements each: holder h's parts of each slot
//! (`part(h)`: the elements of segments segs[h], in order; a tensor-parallel
//! pipeline lane's) joined; a replicated segment is taken from each holder
//! that has it (they agree).
template <class Part>
std::vector<Tensor<float>> join_state_segments(std::size_t n, std::span<const std::vector<TensorSegment>> segs,
                                               Part&& part) {
  std::vector<Tensor<float>> out;
  for (std::size_t h = 0; h < segs.size(); ++h) {
    std::vector<Tensor<float>> mine = part(h);
    if (out.empty())
      for (std::size_t k = 0; k < mine.size(); ++k) out.emplace_back(Shape{n});
    for (std::size_t k = 0; k < mine.size(); ++k) move_segments(segs[h], out[k].span(), mine[k].span(), true);
  }
  return out;
}

//! Segments `segs` of each whole slot, gathered (a lane's part of the state).
inline std::vector<Tensor<float>> state_segments(std::span<const Tensor<float>> slots,
                                                 std::span<const TensorSegment> segs) {
  std::vector<Tensor<float>> part;
  for (const auto& t : slots) {
    Tensor<float> s{Shape{segments_size(segs)}};
    move_segments(segs, std::span<float>(const_cast<float*>(t.data()), t.size()), s.span(), false);
    part.push_back(std::move(s));
  }
  return part;
}

//! Whole optimizer state slots of `n` elements each, else a ShapeError.
inline void check_state_slots(std::span<const Tensor<float>> slots, std::size_t n) {
  for (const auto& t : slots)
    if (t.size() != n)
      throw ShapeError("set_optimizer_state: a slot of " + std::to_string(t.size()) + " elements for " +
                       std::to_string(n) + " parameters");
}

//! Slice `r` of each whole slot (a replica's share of the sharded update's state, a stage's).
inline std::vector<Tensor<float>> state_slice(std::span<const Tensor<float>> slots, Range r) {
  std::vector<Tensor<float>> part;
  for (const auto& t : slots) {
    Tensor<float> s{Shape{r.size()}};
    std::copy_n(t.data() + r.begin, s.size(), s.data());
    part.push_back(std::move(s));
  }
  return part;
}

}  // namespace strata::detail
