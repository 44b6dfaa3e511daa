#pragma once
//! The pieces every pipeline stage is made of: Cardinality, Stream (one
//! pass), Node (a stage), and the bases for stages that run over table rows.

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <strata/data/detail/slice_table.hpp>
#include <strata/data/element.hpp>

namespace strata::data::detail {

//! Elements in a pass: known, infinite, or unknown (a generator's, say). The
//! public API folds the last two into nullopt; take() needs them apart.
struct Cardinality {
  enum class Kind { finite, infinite, unknown };
  Kind kind = Kind::unknown;
  std::size_t n = 0;

  static constexpr Cardinality finite(std::size_t n) noexcept { return {Kind::finite, n}; }
  static constexpr Cardinality infinite() noexcept { return {Kind::infinite, 0}; }
  static constexpr Cardinality unknown() noexcept { return {Kind::unknown, 0}; }
  [[nodiscard]] constexpr bool is_finite() const noexcept { return kind == Kind::finite; }
};

//! One pass over a pipeline stage. Item is an element, or a row index for the
//! stages that run over the rows of a SliceTable.
template <class Item>
class Stream {
 public:
  virtual ~Stream() = default;
  //! The next item, or nullopt at the end of the pass (and on every call
  //! after it: shuffle keeps pulling its input after the input ended).
  virtual std::optional<Item> next() = 0;
};
template <class Item>
using StreamPtr = std::unique_ptr<Stream<Item>>;

//! A stage of a pipeline: opens passes and knows its cardinality. Nodes are
//! shared by every Dataset copy and every pass, so they are immutable (bar
//! shuffle's pass counter, which is atomic).
template <DatasetElement E>
class Node {
 public:
  virtual ~Node() = default;
  [[nodiscard]] virtual StreamPtr<E> open() const = 0;
  [[nodiscard]] virtual Cardinality cardinality() const = 0;
  //! Non-null when every element of a pass is a row of this table; then
  //! open_rows() opens a pass that yields the row indices instead.
  [[nodiscard]] virtual std::shared_ptr<const SliceTable<E>> table() const { return nullptr; }
  [[nodiscard]] virtual StreamPtr<std::size_t> open_rows() const { return nullptr; }
  //! This pipeline reading only every num-th input file starting at `index`
  //! (auto-sharding by file), or null when it does not start from files.
  [[nodiscard]] virtual std::shared_ptr<const Node<E>> shard_files(std::size_t /*num*/, std::size_t /*index*/) const {
    return nullptr;
  }
  //! Appends the pass counters of the stages up to this one, in pipeline
  //! order (shuffle's: which pass it opens next, so which order it draws):
  //! a pipeline's random position, as a checkpoint keeps it.
  virtual void pass_counters(std::vector<std::uint64_t>& /*out*/) const {}
  //! Sets them from in[at...] in the same order, advancing `at`.
  virtual void set_pass_counters(std::span<const std::uint64_t> /*in*/, std::size_t& /*at*/) const {}
};
template <DatasetElement E>
using NodePtr = std::shared_ptr<const Node<E>>;

template <class Item, DatasetElement E>
StreamPtr<Item> open_stream(const Node<E>& node) {
  if constexpr (std::is_same_v<Item, std::size_t>) return node.open_rows();
  else return node.open();
}

//! Turns a stream of row indices into a stream of elements.
template <DatasetElement E>
class RowElements final : public Stream<E> {
 public:
  RowElements(StreamPtr<std::size_t> rows, std::shared_ptr<const SliceTable<E>> table)
      : rows_(std::move(rows)), table_(std::move(table)) {}
  std::optional<E> next() override {
    auto i = rows_->next();
    if (!i) return std::nullopt;
    return table_->row(*i);
  }

 private:
  StreamPtr<std::size_t> rows_;
  std::shared_ptr<const SliceTable<E>> table_;
};

//! Base of the stages that work the same on elements and on row indices
//! (shuffle, repeat, take, skip, shard): Derived::stream<Item>() builds the
//! pass; when the input runs over a table, so does this stage.
template <DatasetElement E, class Derived>
class ForwardingNode : public Node<E> {
 public:
  explicit ForwardingNode(NodePtr<E> up) : up_(std::move(up)) {}
  StreamPtr<E> open() const override {
    if (auto t = up_->table())
      return std::make_unique<RowElements<E>>(self().template stream<std::size_t>(), std::move(t));
    return self().template stream<E>();
  }
  std::shared_ptr<const SliceTable<E>> table() const override { return up_->table(); }
  StreamPtr<std::size_t> open_rows() const override {
    return up_->table() ? self().template stream<std::size_t>() : nullptr;
  }
  //! The same stage over the file-sharded input (Derived::rebuild(up) copies the stage).
  NodePtr<E> shard_files(std::size_t num, std::size_t index) const override {
    auto up = up_->shard_files(num, index);
    return up ? self().rebuild(std::move(up)) : nullptr;
  }
  void pass_counters(std::vector<std::uint64_t>& out) const override { up_->pass_counters(out); }
  void set_pass_counters(std::span<const std::uint64_t> in, std::size_t& at) const override {
    up_->set_pass_counters(in, at);
  }

 protected:
  NodePtr<E> up_;

 private:
  const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
};

}  // namespace strata::data::detail
