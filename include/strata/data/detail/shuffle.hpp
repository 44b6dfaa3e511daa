#pragma once
//! The shuffle stage: a tf.data-style shuffle buffer, keyed per pass.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <strata/core/error.hpp>
#include <utility>
#include <vector>

#include <strata/data/detail/node.hpp>
#include <strata/data/element.hpp>
#include <strata/core/random.hpp>

namespace strata::data::detail {

template <class Item>
class ShuffleStream final : public Stream<Item> {
 public:
  ShuffleStream(StreamPtr<Item> up, std::size_t buffer_size, std::uint64_t key)
      : up_(std::move(up)), buffer_size_(buffer_size), rng_(key) {}

  std::optional<Item> next() override {
    if (!filled_) {
      filled_ = true;
      while (buf_.size() < buffer_size_) {
        auto x = up_->next();
        if (!x) break;
        buf_.push_back(std::move(*x));
      }
    }
    if (buf_.empty()) return std::nullopt;
    const auto j = static_cast<std::size_t>(rng_.below(buf_.size()));
    Item out = std::move(buf_[j]);
    if (auto x = up_->next()) {
      buf_[j] = std::move(*x);
    } else {
      if (j + 1 != buf_.size()) buf_[j] = std::move(buf_.back());
      buf_.pop_back();
    }
    return out;
  }

 private:
  StreamPtr<Item> up_;
  std::size_t buffer_size_;
  Rng rng_;
  std::vector<Item> buf_;
  bool filled_ = false;
};

template <DatasetElement E>
class ShuffleNode final : public ForwardingNode<E, ShuffleNode<E>> {
 public:
  ShuffleNode(NodePtr<E> up, std::size_t buffer_size, std::uint64_t seed, bool reshuffle)
      : ForwardingNode<E, ShuffleNode<E>>(std::move(up)), buffer_size_(buffer_size), seed_(seed),
        reshuffle_(reshuffle) {}
  NodePtr<E> rebuild(NodePtr<E> up) const {
    return std::make_shared<const ShuffleNode>(std::move(up), buffer_size_, seed_, reshuffle_);
  }
  Cardinality cardinality() const override { return this->up_->cardinality(); }

  template <class Item>
  StreamPtr<Item> stream() const {
    const std::uint64_t pass = passes_.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t key = strata::detail::mix(seed_, reshuffle_ ? pass : 0);
    return std::make_unique<ShuffleStream<Item>>(open_stream<Item>(*this->up_), buffer_size_, key);
  }

  void pass_counters(std::vector<std::uint64_t>& out) const override {
    this->up_->pass_counters(out);
    out.push_back(passes_.load(std::memory_order_relaxed));
  }
  void set_pass_counters(std::span<const std::uint64_t> in, std::size_t& at) const override {
    this->up_->set_pass_counters(in, at);
    if (at >= in.size()) throw Error("Dataset::set_pass_counters: fewer counters than the pipeline's shuffles");
    passes_.store(in[at++], std::memory_order_relaxed);
  }

 private:
  std::size_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_;
  mutable std::atomic<std::uint64_t> passes_{0};
};

}  // namespace strata::data::detail
