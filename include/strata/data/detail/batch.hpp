#pragma once
//! The batch stage: stacks elements (or gathers table rows) along a new
//! leading axis.

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/data/detail/node.hpp>
#include <strata/data/detail/slice_table.hpp>
#include <strata/data/element.hpp>
#include <strata/tensor/shape.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::data::detail {

//! Stacks elements of one shape along a new leading axis. `first` is the
//! position of elems[0] in the pass, for the error message.
template <DatasetElement E>
E stack(std::span<const E> elems, std::size_t first, std::size_t batch_index) {
  E out;
  for_each_index<components_v<E>>([&](auto k) {
    const auto& c0 = component<k>(elems[0]);
    using T = typename std::remove_cvref_t<decltype(c0)>::value_type;
    const Shape& s0 = c0.shape();
    for (std::size_t j = 1; j < elems.size(); ++j) {
      const Shape& sj = component<k>(elems[j]).shape();
      if (sj != s0)
        throw ShapeError("Dataset::batch: element " + std::to_string(first + j) + " of the pass (" +
                         std::to_string(j) + " of batch " + std::to_string(batch_index) + ") has " +
                         component_name<E>(k) + "shape " + sj.str() + " but the batch's first element (element " +
                         std::to_string(first) + ") has " + s0.str() +
                         "; elements batched together must have the same shape (map them to one shape first)");
    }
    const std::size_t rs = s0.elements();
    Tensor<T> t(with_leading(elems.size(), s0, 0));
    if (rs)
      for (std::size_t j = 0; j < elems.size(); ++j)
        std::memcpy(t.data() + j * rs, component<k>(elems[j]).data(), rs * sizeof(T));
    component<k>(out) = std::move(t);
  });
  return out;
}

template <DatasetElement E>
class BatchStream final : public Stream<E> {
 public:
  BatchStream(StreamPtr<E> up, std::size_t n, bool drop) : up_(std::move(up)), n_(n), drop_(drop) {
    buf_.reserve(n);
  }
  std::optional<E> next() override {
    buf_.clear();
    while (buf_.size() < n_) {
      auto x = up_->next();
      if (!x) break;
      buf_.push_back(std::move(*x));
    }
    if (buf_.empty() || (drop_ && buf_.size() < n_)) return std::nullopt;
    const std::size_t first = pulled_;
    pulled_ += buf_.size();
    return stack<E>(buf_, first, batches_++);
  }

 private:
  StreamPtr<E> up_;
  std::size_t n_;
  bool drop_;
  std::vector<E> buf_;
  std::size_t pulled_ = 0, batches_ = 0;
};

template <DatasetElement E>
class BatchRowsStream final : public Stream<E> {
 public:
  BatchRowsStream(StreamPtr<std::size_t> up, std::shared_ptr<const SliceTable<E>> table, std::size_t n, bool drop)
      : up_(std::move(up)), table_(std::move(table)), n_(n), drop_(drop) {
    idx_.reserve(n);
  }
  std::optional<E> next() override {
    idx_.clear();
    while (idx_.size() < n_) {
      auto i = up_->next();
      if (!i) break;
      idx_.push_back(*i);
    }
    if (idx_.empty() || (drop_ && idx_.size() < n_)) return std::nullopt;
    return table_->gather(idx_);
  }

 private:
  StreamPtr<std::size_t> up_;
  std::shared_ptr<const SliceTable<E>> table_;
  std::size_t n_;
  bool drop_;
  std::vector<std::size_t> idx_;
};

template <DatasetElement E>
class BatchNode final : public Node<E> {
 public:
  BatchNode(NodePtr<E> up, std::size_t n, bool drop) : up_(std::move(up)), n_(n), drop_(drop) {}
  StreamPtr<E> open() const override {
    if (auto t = up_->table()) return std::make_unique<BatchRowsStream<E>>(up_->open_rows(), std::move(t), n_, drop_);
    return std::make_unique<BatchStream<E>>(up_->open(), n_, drop_);
  }
  Cardinality cardinality() const override {
    const Cardinality c = up_->cardinality();
    if (!c.is_finite()) return c;
    return Cardinality::finite(drop_ ? c.n / n_ : c.n / n_ + (c.n % n_ ? 1 : 0));
  }
  //! Over file-sharded input the batch is the worker's share of the global
  //! batch (n / num, rounded up), as tf.distribute rebatches.
  NodePtr<E> shard_files(std::size_t num, std::size_t index) const override {
    auto up = up_->shard_files(num, index);
    return up ? std::make_shared<const BatchNode>(std::move(up), (n_ + num - 1) / num, drop_) : nullptr;
  }

 void pass_counters(std::vector<std::uint64_t>& out) const override { up_->pass_counters(out); }
  void set_pass_counters(std::span<const std::uint64_t> in, std::size_t& at) const override {
    up_->set_pass_counters(in, at);
  }

  private:
  NodePtr<E> up_;
  std::size_t n_;
  bool drop_;
};

}  // namespace strata::data::detail
