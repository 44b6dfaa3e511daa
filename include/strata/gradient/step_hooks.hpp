#pragma once
//! What a replica's step tells and asks its executor as it goes (the
//! seam's hooks, StepInfo::ready and StepInfo::windows; execution/program.hpp):
//! gradient ranges that became final (gradient buckets), and where each
//! layer's parameters are when they are sharded (ZeRO 2 and 3).
//!   info.ready = &buckets;  info.windows = &shards;  rep.step(batch, rows, info, out);

#include <cstddef>
#include <span>

namespace strata {

//! What a replica's backward tells its executor as it goes (gradient
//! buckets: gradient/buckets.hpp): the gradient of a contiguous range of the
//! flat parameters is final for this step (its share of the regularization
//! gradient included), so its reduction may start while backward goes on.
//! Parameters are laid out in layer order and backward runs in reverse, so
//! the ranges come from the end of the flat vector down.
//!   struct Log : strata::GradientReady { void ready(std::size_t b, std::size_t e) override { ... } };
class GradientReady {
 public:
  virtual ~GradientReady() = default;
  //! Elements [begin, end) of the bound gradient buffer will not change again this step.
  virtual void ready(std::size_t begin, std::size_t end) = 0;
};

//! Where a layer's parameters are for one call (sharded data parallelism,
//! ZeRO stages 2 and 3: parallel/zero/fully_sharded.hpp): before each forward
//! and backward of a layer with parameters the replica acquires the range
//! of the flat layout its parameters take, and binds the layer to the
//! values and the gradient window it is given (values gathered from the
//! replicas' shards, a gradient buffer the size of the layer); after the
//! call it releases it (after a backward: the window holds the layer's
//! final gradient, its share of the regularization gradient added, to be
//! reduced). A replica made with an empty gradient buffer binds its layers
//! only through these.
//!   struct Windows : strata::ParameterWindows { View acquire(std::size_t b, std::size_t e, bool back) override; ... };
class ParameterWindows {
 public:
  virtual ~ParameterWindows() = default;
  struct View {
    std::span<const float> value;  //!< the layer's values, end - begin elements
    std::span<float> grad;         //!< backward: where its gradient goes (overwritten), end - begin elements
  };
  virtual View acquire(std::size_t begin, std::size_t end, bool backward) = 0;
  virtual void release(std::size_t begin, std::size_t end, bool backward) = 0;
};

}  // namespace strata
