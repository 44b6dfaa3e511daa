#pragma once
//! The stages that repeat or select elements without touching them: repeat,
//! take, skip and shard.

#include <algorithm>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include <strata/data/detail/node.hpp>
#include <strata/data/element.hpp>

namespace strata::data::detail {

template <class Item, DatasetElement E>
class RepeatStream final : public Stream<Item> {
 public:
  RepeatStream(NodePtr<E> up, std::optional<std::size_t> count) : up_(std::move(up)), left_(count) {
    if (!left_ || *left_ > 0) cur_ = open_stream<Item>(*up_);
  }
  std::optional<Item> next() override {
    while (cur_) {
      if (auto x = cur_->next()) {
        produced_ = true;
        return x;
      }
      // An empty pass ends the repetition: repeating it forever would spin.
      if (!produced_ || (left_ && --*left_ == 0)) {
        cur_.reset();
        break;
      }
      produced_ = false;
      cur_ = open_stream<Item>(*up_);
    }
    return std::nullopt;
  }

 private:
  NodePtr<E> up_;
  std::optional<std::size_t> left_;  // passes left, counting the current one
  StreamPtr<Item> cur_;
  bool produced_ = false;
};

template <DatasetElement E>
class RepeatNode final : public ForwardingNode<E, RepeatNode<E>> {
 public:
  RepeatNode(NodePtr<E> up, std::optional<std::size_t> count)
      : ForwardingNode<E, RepeatNode<E>>(std::move(up)), count_(count) {}
  NodePtr<E> rebuild(NodePtr<E> up) const { return std::make_shared<const RepeatNode>(std::move(up), count_); }

  Cardinality cardinality() const override {
    const Cardinality c = this->up_->cardinality();
    if (count_ && *count_ == 0) return Cardinality::finite(0);
    if (c.is_finite() && c.n == 0) return Cardinality::finite(0);
    if (c.kind != Cardinality::Kind::finite) return c;
    if (!count_) return Cardinality::infinite();
    if (c.n > std::numeric_limits<std::size_t>::max() / *count_) return Cardinality::unknown();
    return Cardinality::finite(c.n * *count_);
  }

  template <class Item>
  StreamPtr<Item> stream() const { return std::make_unique<RepeatStream<Item, E>>(this->up_, count_); }

 private:
  std::optional<std::size_t> count_;
};

template <class Item>
class TakeStream final : public Stream<Item> {
 public:
  TakeStream(StreamPtr<Item> up, std::size_t n) : up_(std::move(up)), left_(n) {}
  std::optional<Item> next() override {
    if (left_ == 0) return std::nullopt;
    --left_;
    return up_->next();
  }

 private:
  StreamPtr<Item> up_;
  std::size_t left_;
};

template <DatasetElement E>
class TakeNode final : public ForwardingNode<E, TakeNode<E>> {
 public:
  TakeNode(NodePtr<E> up, std::size_t n) : ForwardingNode<E, TakeNode<E>>(std::move(up)), n_(n) {}
  NodePtr<E> rebuild(NodePtr<E> up) const { return std::make_shared<const TakeNode>(std::move(up), n_); }
  Cardinality cardinality() const override {
    const Cardinality c = this->up_->cardinality();
    if (n_ == 0 || c.kind == Cardinality::Kind::infinite) return Cardinality::finite(n_);
    if (c.is_finite()) return Cardinality::finite(std::min(c.n, n_));
    return c;
  }
  template <class Item>
  StreamPtr<Item> stream() const {
    // take(0) must not even open its input: opening can start work (a prefetch thread).
    if (n_ == 0) return std::make_unique<TakeStream<Item>>(nullptr, 0);
    return std::make_unique<TakeStream<Item>>(open_stream<Item>(*this->up_), n_);
  }

 private:
  std::size_t n_;
};

template <class Item>
class SkipStream final : public Stream<Item> {
 public:
  SkipStream(StreamPtr<Item> up, std::size_t n) : up_(std::move(up)), skip_(n) {}
  std::optional<Item> next() override {
    for (; skip_ > 0; --skip_)
      if (!up_->next()) {
        skip_ = 0;
        return std::nullopt;
      }
    return up_->next();
  }

 private:
  StreamPtr<Item> up_;
  std::size_t skip_;
};

template <DatasetElement E>
class SkipNode final : public ForwardingNode<E, SkipNode<E>> {
 public:
  SkipNode(NodePtr<E> up, std::size_t n) : ForwardingNode<E, SkipNode<E>>(std::move(up)), n_(n) {}
  NodePtr<E> rebuild(NodePtr<E> up) const { return std::make_shared<const SkipNode>(std::move(up), n_); }
  Cardinality cardinality() const override {
    const Cardinality c = this->up_->cardinality();
    if (c.is_finite()) return Cardinality::finite(c.n > n_ ? c.n - n_ : 0);
    return c;
  }
  template <class Item>
  StreamPtr<Item> stream() const { return std::make_unique<SkipStream<Item>>(open_stream<Item>(*this->up_), n_); }

 private:
  std::size_t n_;
};

template <class Item>
class ShardStream final : public Stream<Item> {
 public:
  ShardStream(StreamPtr<Item> up, std::size_t num, std::size_t index)
      : up_(std::move(up)), num_(num), gap_(index) {}
  std::optional<Item> next() override {
    if (!up_) return std::nullopt;
    for (; gap_ > 0; --gap_)
      if (!up_->next()) {
        up_.reset();  // finished: later calls must not pull the input again
        return std::nullopt;
      }
    gap_ = num_ - 1;
    auto x = up_->next();
    if (!x) up_.reset();
    return x;
  }

 private:
  StreamPtr<Item> up_;
  std::size_t num_, gap_;  // gap_: input elements to drop before the next kept one
};

template <DatasetElement E>
class ShardNode final : public ForwardingNode<E, ShardNode<E>> {
 public:
  ShardNode(NodePtr<E> up, std::size_t num, std::size_t index)
      : ForwardingNode<E, ShardNode<E>>(std::move(up)), num_(num), index_(index) {}
  NodePtr<E> rebuild(NodePtr<E> up) const { return std::make_shared<const ShardNode>(std::move(up), num_, index_); }
  Cardinality cardinality() const override {
    const Cardinality c = this->up_->cardinality();
    if (c.is_finite()) return Cardinality::finite(c.n / num_ + (index_ < c.n % num_ ? 1 : 0));
    return c;
  }
  template <class Item>
  StreamPtr<Item> stream() const {
    return std::make_unique<ShardStream<Item>>(open_stream<Item>(*this->up_), num_, index_);
  }

 private:
  std::size_t num_, index_;
};

}  // namespace strata::data::detail
