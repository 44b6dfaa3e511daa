#pragma once
//! A dataset marked for distribution by a strategy (Strategy::distribute),
//! and its iteration in a custom loop: each element is a DistributedBatch,
//! the global batch with the rows of it each replica takes (the split the
//! synchronous executors use: contiguous, balanced, shard_range's rule).
//!   for (const auto& batch : strategy.distribute(train.batch(128))) {
//!     model.train_step(batch);                                   // the strategy splits it, as fit does
//!     strategy.run([&](auto& ctx) { auto [x, y] = batch.local(ctx); /* this replica's rows */ });
//!   }

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <string>
#include <utility>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/data/split.hpp>
#include <strata/strategy/any_strategy.hpp>

namespace strata {

//! One element of a distributed dataset in a custom loop: the global batch
//! (across workers reading their own files: this worker's share of it), the
//! strategy that distributes it and which rows each of its replicas takes.
//! Valid until the loop advances. The split is the data-parallel one (over
//! every replica in sync); a pipeline's replicas are stages, which all see
//! their copy's rows: there, hand the whole batch to model.train_step.
template <class E>
struct DistributedBatch {
  const E* element = nullptr;
  AnyStrategy* strategy = nullptr;
  bool per_worker = false;  //!< `element` is this worker's share (split over its local replicas)
  int parts = 1;            //!< replicas `element` is split over
  int first = 0;            //!< the global id of the replica taking part 0

  //! The batch as the dataset gave it.
  [[nodiscard]] const E& global() const noexcept { return *element; }
  //! Its rows.
  [[nodiscard]] std::size_t size() const { return data::batch_size(*element); }
  //! The rows global replica `replica` takes (an empty range when the batch
  //! has fewer rows than replicas, for the last ones).
  [[nodiscard]] Range rows_of(int replica) const {
    if (replica < first || replica >= first + parts)
      throw Error("DistributedBatch: replica " + std::to_string(replica) + " takes no part of this batch (replicas " +
                  std::to_string(first) + " to " + std::to_string(first + parts - 1) + " of this process do)");
    return shard_range(size(), static_cast<std::size_t>(parts), static_cast<std::size_t>(replica - first));
  }
  //! A copy of the rows of the replica running `ctx` (inside strategy.run).
  template <class Ctx>
  [[nodiscard]] E local(const Ctx& ctx) const {
    const Range r = rows_of(ctx.replica_id_in_sync_group());
    return data::slice_rows(*element, r.begin, r.end);
  }
};

//! `dataset` whose global batches are split over `strategy`'s replicas.
//! `per_worker`: each worker reads its own share of the input (sharded by
//! file) and its batches are its share of the global batch.
//! Iterable (range-for): each pass a new pass of the dataset, each element
//! a DistributedBatch.
template <class D>
struct Distributed {
  D dataset;
  AnyStrategy* strategy = nullptr;
  bool per_worker = false;

  template <class It>
  class Iterator {
   public:
    using value_type = DistributedBatch<std::remove_cvref_t<decltype(*std::declval<It&>())>>;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;
    Iterator(It it, value_type proto) : it_(std::move(it)), proto_(proto) {}
    value_type operator*() const {
      value_type b = proto_;
      b.element = &*it_;
      return b;
    }
    Iterator& operator++() {
      ++it_;
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const Iterator& i, std::default_sentinel_t s) { return i.it_ == s; }

   private:
    It it_;
    value_type proto_;
  };

  //! A new pass over the dataset.
  [[nodiscard]] auto begin() const {
    using It = decltype(dataset.begin());
    typename Iterator<It>::value_type proto{nullptr, strategy, per_worker, 1, 0};
    if (strategy) {
      const int p = strategy->num_replicas_in_sync(), w = strategy->num_workers();
      proto.parts = per_worker ? p / w : p;
      proto.first = per_worker ? strategy->worker_index() * (p / w) : 0;
    }
    return Iterator<It>(dataset.begin(), proto);
  }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }
};

}  // namespace strata
