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

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/data/detail/batch.hpp>
#include <strata/data/detail/files.hpp>
#include <strata/data/detail/map.hpp>
#include <strata/data/detail/node.hpp>
#include <strata/data/detail/prefetch.hpp>
#include <strata/data/detail/repeat_take_skip_shard.hpp>
#include <strata/data/detail/shuffle.hpp>
#include <strata/data/detail/sources.hpp>
#include <strata/data/element.hpp>
#include <strata/data/iterator.hpp>
#include <strata/tensor/shape.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::data {

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

  //! The pipeline's random position: its shuffles' pass counters, in
  //! pipeline order (which order each draws in the next pass it opens). A
  //! checkpoint keeps them so that a resumed run reads the same orders.
  [[nodiscard]] std::vector<std::uint64_t> pass_counters() const {
    std::vector<std::uint64_t> out;
    node_->pass_counters(out);
    return out;
  }
  //! Sets what pass_counters() returned (of a pipeline built the same way).
  void set_pass_counters(std::span<const std::uint64_t> c) const {
    std::size_t at = 0;
    if (pass_counters().size() != c.size())
      throw Error("Dataset::set_pass_counters: the pipeline has " + std::to_string(pass_counters().size()) +
                  " shuffles, got " + std::to_string(c.size()) + " counters (a pipeline built differently?)");
    node_->set_pass_counters(c, at);
  }
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

  //! This pipeline reading only input files index, index + num, ... (and
  //! batching num times fewer elements), when it starts from from_files();
  //! nullopt otherwise. What MultiWorkerMirroredStrategy::distribute does to
  //! a dataset read from several files (auto-sharding by file); throws when
  //! there are fewer files than `num`.
  [[nodiscard]] std::optional<Dataset> shard_files(std::size_t num, std::size_t index) const {
    if (num == 0 || index >= num)
      throw Error("Dataset::shard_files: index " + std::to_string(index) + " is out of range for " +
                  std::to_string(num) + " shards");
    if (auto n = node_->shard_files(num, index)) return Dataset(std::move(n));
    return std::nullopt;
  }

  //! The pipeline's last stage (how new stages and sources plug in).
  [[nodiscard]] const detail::NodePtr<E>& node() const noexcept { return node_; }

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

//! The elements of several files, file after file: `read(path)` returns the
//! dataset of one file's elements (a Dataset<E>), called when a pass reaches
//! that file. Across workers, MultiWorkerMirroredStrategy::distribute gives
//! each worker its share of the files (auto-sharding by file).
//!   auto ds = strata::data::from_files(paths, [](const std::filesystem::path& p) {
//!     return strata::data::from_tensor_slices(read_images(p), read_labels(p)); });
template <class F>
  requires std::is_invocable_v<F&, const std::filesystem::path&>
auto from_files(std::vector<std::filesystem::path> files, F read) {
  using D = std::remove_cvref_t<std::invoke_result_t<F&, const std::filesystem::path&>>;
  using E = typename D::element_type;
  static_assert(std::same_as<D, Dataset<E>>, "from_files: the reader must return a strata::data::Dataset");
  typename detail::FilesNode<E>::Reader reader = [read = std::move(read)](const std::filesystem::path& p) mutable {
    return read(p).node();
  };
  return Dataset<E>(std::make_shared<const detail::FilesNode<E>>(std::move(files), std::move(reader)));
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
