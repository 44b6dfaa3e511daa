#pragma once
//! Input pipelines in the style of tf.data: a Dataset is an immutable,
//! cheaply copyable description of a pipeline; iterating it starts a pass.
//!   auto ds = strata::data::from_tensor_slices(images, labels).shuffle(60000, 42).batch(128);
//!   for (auto& [x, y] : ds) train_step(x, y);   // x: [128, 28, 28], y: [128]
//!
//! Elements are a strata::Tensor<T> or a std::tuple of them. Passes of a
//! pipeline that starts with from_tensor_slices move row indices rather than
//! rows through shuffle/take/skip/shard/repeat, and batch copies each row once,
//! straight from the sliced tensors into the batch.

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/core/concepts.hpp>
#include <strata/core/error.hpp>
#include <strata/nn/random.hpp>
#include <strata/tensor/shape.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::data {

namespace detail {

template <class E>
struct ElementTraits : std::false_type {};
template <Element T>
struct ElementTraits<Tensor<T>> : std::true_type {
  static constexpr std::size_t size = 1;
  static constexpr bool tuple = false;
};
template <Element... T>
  requires(sizeof...(T) >= 1)
struct ElementTraits<std::tuple<Tensor<T>...>> : std::true_type {
  static constexpr std::size_t size = sizeof...(T);
  static constexpr bool tuple = true;
};

}  // namespace detail

//! What a Dataset yields: a host strata::Tensor<T>, or a std::tuple of one or
//! more of them (features and labels, say).
//!   static_assert(strata::data::DatasetElement<std::tuple<Tensor<float>, Tensor<std::int32_t>>>);
//!   static_assert(!strata::data::DatasetElement<float>);
template <class E>
concept DatasetElement = detail::ElementTraits<E>::value;

namespace detail {

//! Number of tensors in an element (1 for a lone tensor).
template <DatasetElement E>
inline constexpr std::size_t components_v = ElementTraits<E>::size;

//! Component I of an element; a lone tensor is its own component 0.
template <std::size_t I, Element T>
Tensor<T>& component(Tensor<T>& e) noexcept {
  static_assert(I == 0);
  return e;
}
template <std::size_t I, Element T>
const Tensor<T>& component(const Tensor<T>& e) noexcept {
  static_assert(I == 0);
  return e;
}
template <std::size_t I, class... C>
auto& component(std::tuple<C...>& e) noexcept { return std::get<I>(e); }
template <std::size_t I, class... C>
const auto& component(const std::tuple<C...>& e) noexcept { return std::get<I>(e); }

//! Calls f(std::integral_constant<size_t, I>) for I = 0 .. N-1.
template <std::size_t N, class F>
constexpr void for_each_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(std::integral_constant<std::size_t, I>{}), ...);
  }(std::make_index_sequence<N>{});
}

//! "component 1 " for tuples, "" for a lone tensor: error messages name the
//! component only when there is a choice.
template <DatasetElement E>
std::string component_name(std::size_t k) {
  if constexpr (ElementTraits<E>::tuple) return "component " + std::to_string(k) + " ";
  else return "";
}

//! [lead, dims[from:]...]
inline Shape with_leading(std::size_t lead, const Shape& s, std::size_t from) {
  std::vector<std::size_t> d;
  d.reserve(s.rank() - from + 1);
  d.push_back(lead);
  d.insert(d.end(), s.dims().begin() + static_cast<std::ptrdiff_t>(from), s.dims().end());
  return Shape(std::move(d));
}

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

//! The tensors from_tensor_slices slices, with each row's shape and size
//! precomputed, so that a row (or a batch of rows) is built by memcpy.
template <DatasetElement E>
class SliceTable {
 public:
  static constexpr std::size_t K = components_v<E>;

  explicit SliceTable(E source) : source_(std::move(source)) {
    rows_ = component<0>(source_).shape()[0];
    for_each_index<K>([&](auto k) {
      const Shape& s = component<k>(source_).shape();
      row_shape_[k] = Shape(std::vector<std::size_t>(s.dims().begin() + 1, s.dims().end()));
      row_size_[k] = row_shape_[k].elements();
    });
  }

  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }

  //! Row i of every component, as an element of per-row shape.
  [[nodiscard]] E row(std::size_t i) const {
    E out;
    for_each_index<K>([&](auto k) {
      const auto& src = component<k>(source_);
      using T = typename std::remove_cvref_t<decltype(src)>::value_type;
      Tensor<T> t(row_shape_[k]);
      if (row_size_[k]) std::memcpy(t.data(), src.data() + i * row_size_[k], row_size_[k] * sizeof(T));
      component<k>(out) = std::move(t);
    });
    return out;
  }

  //! Rows idx[0], idx[1], ... stacked along a new leading axis. Consecutive
  //! indices (an unshuffled pass) are copied as one block.
  [[nodiscard]] E gather(std::span<const std::size_t> idx) const {
    E out;
    for_each_index<K>([&](auto k) {
      const auto& src = component<k>(source_);
      using T = typename std::remove_cvref_t<decltype(src)>::value_type;
      const std::size_t rs = row_size_[k];
      Tensor<T> t(with_leading(idx.size(), row_shape_[k], 0));
      if (rs) {
        for (std::size_t j = 0; j < idx.size();) {
          std::size_t run = 1;
          while (j + run < idx.size() && idx[j + run] == idx[j] + run) ++run;
          std::memcpy(t.data() + j * rs, src.data() + idx[j] * rs, run * rs * sizeof(T));
          j += run;
        }
      }
      component<k>(out) = std::move(t);
    });
    return out;
  }

 private:
  E source_;
  std::size_t rows_ = 0;
  std::array<Shape, K> row_shape_;
  std::array<std::size_t, K> row_size_{};
};

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

 protected:
  NodePtr<E> up_;

 private:
  const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
};

// ---- sources ----

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

// ---- shuffle, repeat, take, skip, shard ----

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
  nn::Rng rng_;
  std::vector<Item> buf_;
  bool filled_ = false;
};

template <DatasetElement E>
class ShuffleNode final : public ForwardingNode<E, ShuffleNode<E>> {
 public:
  ShuffleNode(NodePtr<E> up, std::size_t buffer_size, std::uint64_t seed, bool reshuffle)
      : ForwardingNode<E, ShuffleNode<E>>(std::move(up)), buffer_size_(buffer_size), seed_(seed),
        reshuffle_(reshuffle) {}
  Cardinality cardinality() const override { return this->up_->cardinality(); }

  template <class Item>
  StreamPtr<Item> stream() const {
    const std::uint64_t pass = passes_.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t key = nn::detail::mix(seed_, reshuffle_ ? pass : 0);
    return std::make_unique<ShuffleStream<Item>>(open_stream<Item>(*this->up_), buffer_size_, key);
  }

 private:
  std::size_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_;
  mutable std::atomic<std::uint64_t> passes_{0};
};

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

// ---- batch ----

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

 private:
  NodePtr<E> up_;
  std::size_t n_;
  bool drop_;
};

// ---- map ----

template <class F, class E>
struct UnpackInvocable : std::false_type {};
template <class F, class... C>
struct UnpackInvocable<F, std::tuple<C...>> : std::bool_constant<std::is_invocable_v<F&, C&&...>> {};
template <class F, class E>
struct UnpackInvocableLvalue : std::false_type {};
template <class F, class... C>
struct UnpackInvocableLvalue<F, std::tuple<C...>> : std::bool_constant<std::is_invocable_v<F&, C&...>> {};

//! How map calls F: with a tuple's components as separate arguments when F
//! takes them that way (as tf.data does), else with the whole element;
//! rvalues first, so that a by-value parameter steals the tensor.
enum class MapCall { none, unpack, unpack_lvalue, whole, whole_lvalue };
template <class F, class E>
constexpr MapCall map_call() {
  if constexpr (UnpackInvocable<F, E>::value) return MapCall::unpack;
  else if constexpr (UnpackInvocableLvalue<F, E>::value) return MapCall::unpack_lvalue;
  else if constexpr (std::is_invocable_v<F&, E&&>) return MapCall::whole;
  else if constexpr (std::is_invocable_v<F&, E&>) return MapCall::whole_lvalue;
  else return MapCall::none;
}

template <class F, class E>
decltype(auto) call_map(F& f, E&& e) {
  constexpr MapCall how = map_call<F, std::remove_cvref_t<E>>();
  if constexpr (how == MapCall::unpack) return std::apply(f, std::move(e));
  else if constexpr (how == MapCall::unpack_lvalue) return std::apply(f, e);
  else if constexpr (how == MapCall::whole) return f(std::move(e));
  else return f(e);
}

template <class F, class E>
using MapResult = std::remove_cvref_t<decltype(call_map(std::declval<F&>(), std::declval<E>()))>;

template <DatasetElement E, DatasetElement R, class F>
class MapNode final : public Node<R> {
  class Calls final : public Stream<R> {
   public:
    Calls(StreamPtr<E> up, F f) : up_(std::move(up)), f_(std::move(f)) {}
    std::optional<R> next() override {
      auto x = up_->next();
      if (!x) return std::nullopt;
      return std::optional<R>(call_map(f_, std::move(*x)));
    }

   private:
    StreamPtr<E> up_;
    F f_;
  };

 public:
  MapNode(NodePtr<E> up, F f) : up_(std::move(up)), f_(std::move(f)) {}
  // Each pass calls its own copy: a mutable function's state never races
  // between passes (a prefetch thread and the caller's), and restarts per pass.
  StreamPtr<R> open() const override { return std::make_unique<Calls>(up_->open(), f_); }
  Cardinality cardinality() const override { return up_->cardinality(); }

 private:
  NodePtr<E> up_;
  F f_;
};

// ---- prefetch ----

template <DatasetElement E>
class PrefetchStream final : public Stream<E> {
 public:
  PrefetchStream(StreamPtr<E> up, std::size_t capacity) : up_(std::move(up)), capacity_(capacity) {
    thread_ = std::thread([this] { produce(); });
  }
  ~PrefetchStream() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    not_full_.notify_all();
    thread_.join();
  }
  PrefetchStream(const PrefetchStream&) = delete;
  PrefetchStream& operator=(const PrefetchStream&) = delete;

  std::optional<E> next() override {
    std::unique_lock lk(mu_);
    not_empty_.wait(lk, [&] { return !queue_.empty() || done_; });
    if (!queue_.empty()) {
      std::optional<E> out(std::move(queue_.front()));
      queue_.pop_front();
      lk.unlock();
      not_full_.notify_one();
      return out;
    }
    // The producer's failure arrives in order, after the elements it made
    // before failing; once delivered the pass is over.
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return std::nullopt;
  }

 private:
  void produce() {
    for (;;) {
      {
        std::unique_lock lk(mu_);
        // Wait for room before producing, so at most `capacity_` elements
        // are ever made ahead of the consumer.
        not_full_.wait(lk, [&] { return stop_ || queue_.size() < capacity_; });
        if (stop_) return;
      }
      std::optional<E> x;
      std::exception_ptr err;
      try {
        x = up_->next();
      } catch (...) {
        err = std::current_exception();
      }
      bool more = false;
      {
        std::lock_guard lk(mu_);
        if (stop_) return;
        if (x) {
          try {
            queue_.push_back(std::move(*x));
            more = true;
          } catch (...) {
            err = std::current_exception();
          }
        }
        if (!more) {
          error_ = err;
          done_ = true;
        }
      }
      not_empty_.notify_one();
      if (!more) return;
    }
  }

  StreamPtr<E> up_;  // used by the producer thread only, until it is joined
  std::size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<E> queue_;
  std::exception_ptr error_;
  bool done_ = false, stop_ = false;
  std::thread thread_;  // last: started after every member it uses exists
};

template <DatasetElement E>
class PrefetchNode final : public Node<E> {
 public:
  PrefetchNode(NodePtr<E> up, std::size_t n) : up_(std::move(up)), n_(n) {}
  StreamPtr<E> open() const override { return std::make_unique<PrefetchStream<E>>(up_->open(), n_); }
  Cardinality cardinality() const override { return up_->cardinality(); }

 private:
  NodePtr<E> up_;
  std::size_t n_;
};

}  // namespace detail

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

//! An immutable description of an input pipeline over elements E; copies share
//! it. Each iterator() (or range-for) starts a new pass; passes are
//! independent and may run on different threads at once (one thread per pass).
//!   auto ds = strata::data::from_tensor_slices(x, y).shuffle(1024, 7).batch(32).prefetch(2);
//!   std::size_t steps = ds.cardinality().value();
template <DatasetElement E>
class Dataset {
 public:
  using element_type = E;

  //! A dataset with no elements.
  Dataset() : node_(std::make_shared<const detail::EmptyNode<E>>()) {}
  //! Wraps a pipeline stage (how new sources plug in).
  explicit Dataset(detail::NodePtr<E> node) : node_(std::move(node)) {
    if (!node_) throw Error("Dataset: constructed from a null node");
  }

  //! Starts a pass.
  [[nodiscard]] Iterator<E> iterator() const { return Iterator<E>(node_->open()); }
  //! Starts a pass for range-for; each begin() is a new pass.
  [[nodiscard]] RangeIterator<E> begin() const { return RangeIterator<E>(iterator()); }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

  //! Elements in one pass, when known; nullopt when infinite (repeat()) or
  //! unknown (from_function).
  [[nodiscard]] std::optional<std::size_t> cardinality() const {
    const auto c = node_->cardinality();
    return c.is_finite() ? std::optional<std::size_t>(c.n) : std::nullopt;
  }
  //! True when a pass is known never to end.
  [[nodiscard]] bool infinite() const { return node_->cardinality().kind == detail::Cardinality::Kind::infinite; }

  //! The elements `count` times over (nullopt: forever). A pass of the input
  //! that yields nothing ends the repetition.
  [[nodiscard]] Dataset repeat(std::optional<std::size_t> count = std::nullopt) const {
    return Dataset(std::make_shared<const detail::RepeatNode<E>>(node_, count));
  }

  //! Shuffles through a buffer of `buffer_size` elements (a full permutation
  //! when it holds the whole dataset), as tf.data does. The k-th pass opened
  //! from this dataset (or a copy) draws with key mix(seed, k), or with
  //! mix(seed, 0) every pass when `reshuffle_each_iteration` is false.
  [[nodiscard]] Dataset shuffle(std::size_t buffer_size, std::uint64_t seed,
                                bool reshuffle_each_iteration = true) const {
    if (buffer_size == 0) throw Error("Dataset::shuffle: buffer_size must be at least 1 (1 keeps the order)");
    return Dataset(std::make_shared<const detail::ShuffleNode<E>>(node_, buffer_size, seed, reshuffle_each_iteration));
  }

  //! Stacks `n` consecutive elements into tensors with a leading batch axis;
  //! the last batch of a pass is smaller unless `drop_remainder`.
  [[nodiscard]] Dataset batch(std::size_t n, bool drop_remainder = false) const {
    if (n == 0) throw Error("Dataset::batch: batch size must be at least 1, got 0");
    return Dataset(std::make_shared<const detail::BatchNode<E>>(node_, n, drop_remainder));
  }

  //! Applies f to each element. For tuple elements f may take the components
  //! as separate arguments; f must return a tensor or a tuple of tensors.
  //!   auto ds2 = ds.map([](Tensor<float> x, Tensor<std::int32_t> y) { return x; });
  template <class F>
  [[nodiscard]] auto map(F f) const {
    static_assert(detail::map_call<F, E>() != detail::MapCall::none,
                  "Dataset::map: the function must be callable with the element, or for a tuple element with "
                  "its components as separate arguments");
    using R = detail::MapResult<F, E>;
    static_assert(DatasetElement<R>,
                  "Dataset::map: the function must return a strata::Tensor<T> or a std::tuple of them");
    return Dataset<R>(std::make_shared<const detail::MapNode<E, R, F>>(node_, std::move(f)));
  }

  //! Produces up to `n` elements ahead on a background thread. Exceptions
  //! thrown upstream reach the consumer's next(); destroying the iterator
  //! stops the thread.
  [[nodiscard]] Dataset prefetch(std::size_t n) const {
    if (n == 0) throw Error("Dataset::prefetch: buffer size must be at least 1, got 0");
    return Dataset(std::make_shared<const detail::PrefetchNode<E>>(node_, n));
  }

  //! At most the first `n` elements.
  [[nodiscard]] Dataset take(std::size_t n) const {
    return Dataset(std::make_shared<const detail::TakeNode<E>>(node_, n));
  }
  //! All but the first `n` elements.
  [[nodiscard]] Dataset skip(std::size_t n) const {
    return Dataset(std::make_shared<const detail::SkipNode<E>>(node_, n));
  }
  //! Every `num_shards`-th element starting at `index` (tf.data's shard).
  [[nodiscard]] Dataset shard(std::size_t num_shards, std::size_t index) const {
    if (num_shards == 0) throw Error("Dataset::shard: num_shards must be at least 1, got 0");
    if (index >= num_shards)
      throw Error("Dataset::shard: index " + std::to_string(index) + " is out of range for " +
                  std::to_string(num_shards) + " shards (expected 0 to " + std::to_string(num_shards - 1) + ")");
    return Dataset(std::make_shared<const detail::ShardNode<E>>(node_, num_shards, index));
  }

 private:
  detail::NodePtr<E> node_;
};

namespace detail {
template <class O>
struct IsOptional : std::false_type {};
template <class E>
struct IsOptional<std::optional<E>> : std::true_type {};

template <class... T>
using SlicesElement = std::conditional_t<sizeof...(T) == 1, std::tuple_element_t<0, std::tuple<Tensor<T>...>>,
                                         std::tuple<Tensor<T>...>>;
}  // namespace detail

//! A dataset of the rows of the tensors (slices along axis 0): one tensor gives
//! Tensor elements, several give tuples. All must have the same first extent;
//! a rank-1 tensor's rows are rank-0 (one-element) tensors. Pass tensors with
//! std::move to avoid a copy.
//!   auto ds = strata::data::from_tensor_slices(std::move(images), std::move(labels));
//!   // elements: std::tuple<Tensor<float> [28, 28], Tensor<std::int32_t> []>
template <Element... T>
  requires(sizeof...(T) >= 1)
Dataset<detail::SlicesElement<T...>> from_tensor_slices(Tensor<T>... tensors) {
  const Shape* shapes[] = {&tensors.shape()...};
  std::string all;
  for (const Shape* s : shapes) all += (all.empty() ? "" : ", ") + s->str();
  for (std::size_t i = 0; i < sizeof...(T); ++i) {
    if (shapes[i]->rank() == 0)
      throw ShapeError("from_tensor_slices: tensor " + std::to_string(i) +
                       " is a scalar (shape []); slicing needs a leading axis (shapes: " + all + ")");
    if ((*shapes[i])[0] != (*shapes[0])[0])
      throw ShapeError("from_tensor_slices: every tensor must have the same first extent, but the shapes are " +
                       all);
  }
  using E = detail::SlicesElement<T...>;
  return Dataset<E>(std::make_shared<const detail::SlicesNode<E>>(E(std::move(tensors)...)));
}

//! A dataset of exactly one element: the tensors themselves.
//!   auto ds = strata::data::from_tensors(Tensor<float>{{2}, {1.f, 2.f}});
//!   // one element of shape [2]
template <Element... T>
  requires(sizeof...(T) >= 1)
Dataset<detail::SlicesElement<T...>> from_tensors(Tensor<T>... tensors) {
  using E = detail::SlicesElement<T...>;
  return Dataset<E>(std::make_shared<const detail::TensorsNode<E>>(E(std::move(tensors)...)));
}

//! A dataset whose elements come from calling `generator` until it returns
//! nullopt. Each pass calls its own copy of the generator as it was given, so
//! state captured by a mutable lambda restarts every pass. Cardinality unknown.
//!   auto ds = strata::data::from_function([i = 0]() mutable -> std::optional<Tensor<float>> {
//!     return i < 3 ? std::optional(Tensor<float>{{1}, float(i++)}) : std::nullopt; });
template <class G>
  requires std::copy_constructible<G> && std::is_invocable_v<G&>
auto from_function(G generator) {
  using O = std::remove_cvref_t<std::invoke_result_t<G&>>;
  static_assert(detail::IsOptional<O>::value,
                "from_function: the generator must return std::optional<E> (nullopt ends a pass)");
  using E = typename O::value_type;
  static_assert(DatasetElement<E>, "from_function: E must be a strata::Tensor<T> or a std::tuple of them");
  return Dataset<E>(std::make_shared<const detail::FunctionNode<E, G>>(std::move(generator)));
}

}  // namespace strata::data
