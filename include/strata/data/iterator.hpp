#pragma once
//! Passes over a Dataset: Iterator (next() until nullopt) and RangeIterator
//! (what range-for uses).
//!   for (auto& [x, y] : ds) train_step(x, y);

#include <cstddef>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>

#include <strata/data/detail/node.hpp>
#include <strata/data/element.hpp>

namespace strata::data {

//! One pass over a Dataset; move-only.
//!   auto it = ds.iterator();
//!   while (auto e = it.next()) use(*e);
template <DatasetElement E>
class Iterator {
 public:
  explicit Iterator(detail::StreamPtr<E> stream) : stream_(std::move(stream)) {}
  //! The next element, or nullopt once the pass is over. An exception thrown
  //! anywhere in the pipeline (a prefetch thread included) is thrown here.
  std::optional<E> next() { return stream_ ? stream_->next() : std::nullopt; }

 private:
  detail::StreamPtr<E> stream_;
};

//! The input iterator that makes a Dataset a range: `for (auto& e : ds)`.
//! Dereferencing gives the current element (which the loop may move from).
//!   for (auto it = ds.begin(); it != ds.end(); ++it) use(*it);
//!   static_assert(std::input_iterator<RangeIterator<Tensor<float>>>);
template <DatasetElement E>
class RangeIterator {
  struct State {
    Iterator<E> it;
    std::optional<E> cur;
  };

 public:
  using value_type = E;
  using difference_type = std::ptrdiff_t;
  using iterator_concept = std::input_iterator_tag;

  RangeIterator() = default;
  explicit RangeIterator(Iterator<E> it) : s_(std::make_unique<State>(State{std::move(it), std::nullopt})) {
    s_->cur = s_->it.next();
  }
  E& operator*() const { return *s_->cur; }
  E* operator->() const { return &*s_->cur; }
  RangeIterator& operator++() {
    s_->cur = s_->it.next();
    return *this;
  }
  void operator++(int) { ++*this; }
  friend bool operator==(const RangeIterator& i, std::default_sentinel_t) noexcept { return !i.s_ || !i.s_->cur; }

 private:
  std::unique_ptr<State> s_;  // one allocation per pass, so that moving the iterator is cheap
};

}  // namespace strata::data
