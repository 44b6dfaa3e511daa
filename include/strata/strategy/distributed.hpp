#pragma once
//! A dataset marked for distribution by a strategy (Strategy::distribute).
//! It knows nothing about datasets: the strategy's executor splits each global batch.

namespace strata {

class AnyStrategy;

//! `dataset` whose global batches are split over `strategy`'s replicas.
//! `per_worker`: each worker reads its own share of the input (sharded by
//! file) and its batches are its share of the global batch.
template <class D>
struct Distributed {
  D dataset;
  AnyStrategy* strategy = nullptr;
  bool per_worker = false;
};

}  // namespace strata
