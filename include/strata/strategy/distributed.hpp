#pragma once
//! A dataset marked for distribution by a strategy (Strategy::distribute).
//! It knows nothing about datasets: models split each global batch.

namespace strata {

class AnyStrategy;

//! `dataset` whose global batches are split over `strategy`'s replicas.
template <class D>
struct Distributed {
  D dataset;
  AnyStrategy* strategy = nullptr;
};

}  // namespace strata
