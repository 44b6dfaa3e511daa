#pragma once
//! The stages that start a pipeline: empty, from_tensor_slices,
//! from_tensors and from_function.

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include <strata/data/detail/node.hpp>
#include <strata/data/detail/slice_table.hpp>
#include <strata/data/element.hpp>

namespace strata::data::detail {

template <DatasetElement E>
class EmptyNode final : public Node<E> {
  struct Nothing final : Stream<E> {
    std::optional<E> next() override { return std::nullopt; }
  };

 public:
  StreamPtr<E> open() const override { return std::make_unique<Nothing>(); }
  Cardinality cardinality() const override { return Cardinality::finite(0); }
};

class CountStream final : public Stream<std::size_t> {
 public:
  explicit CountStream(std::size_t n) noexcept : n_(n) {}
  std::optional<std::size_t> next() override {
    if (i_ == n_) return std::nullopt;
    return i_++;
  }

 private:
  std::size_t n_, i_ = 0;
};

template <DatasetElement E>
class SlicesNode final : public Node<E> {
 public:
  explicit SlicesNode(E tensors) : table_(std::make_shared<const SliceTable<E>>(std::move(tensors))) {}
  StreamPtr<E> open() const override { return std::make_unique<RowElements<E>>(open_rows(), table_); }
  Cardinality cardinality() const override { return Cardinality::finite(table_->rows()); }
  std::shared_ptr<const SliceTable<E>> table() const override { return table_; }
  StreamPtr<std::size_t> open_rows() const override { return std::make_unique<CountStream>(table_->rows()); }

 private:
  std::shared_ptr<const SliceTable<E>> table_;
};

template <DatasetElement E>
class TensorsNode final : public Node<E> {
  class Once final : public Stream<E> {
   public:
    explicit Once(std::shared_ptr<const E> e) : e_(std::move(e)) {}
    std::optional<E> next() override {
      if (!e_) return std::nullopt;
      std::optional<E> out(*e_);
      e_.reset();
      return out;
    }

   private:
    std::shared_ptr<const E> e_;
  };

 public:
  explicit TensorsNode(E e) : e_(std::make_shared<const E>(std::move(e))) {}
  StreamPtr<E> open() const override { return std::make_unique<Once>(e_); }
  Cardinality cardinality() const override { return Cardinality::finite(1); }

 private:
  std::shared_ptr<const E> e_;
};

template <DatasetElement E, class G>
class FunctionNode final : public Node<E> {
  class Calls final : public Stream<E> {
   public:
    explicit Calls(G g) : g_(std::move(g)) {}
    std::optional<E> next() override {
      if (done_) return std::nullopt;  // a generator is never called again after it said "end"
      std::optional<E> x = g_();
      done_ = !x;
      return x;
    }

   private:
    G g_;
    bool done_ = false;
  };

 public:
  explicit FunctionNode(G g) : g_(std::move(g)) {}
  // Each pass calls a fresh copy, so a generator's state restarts every pass.
  StreamPtr<E> open() const override { return std::make_unique<Calls>(g_); }
  Cardinality cardinality() const override { return Cardinality::unknown(); }

 private:
  G g_;
};

}  // namespace strata::data::detail
