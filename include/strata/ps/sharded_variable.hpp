#pragma once
//! ShardedVariable: one variable stored as shards along its first axis (the
//! parameter server strategy keeps each shard on one server), read and
//! written as a whole like any variable.
//!   strata::ShardedVariable<float> w{init, strata::FixedShardsPartitioner{.num_shards = 3}};
//!   strata::Tensor<float> v = w.value();            // the shards, concatenated
//!   w.shard(1);                                      // rows w.rows(1) of the whole

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/ps/partitioner.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

template <Element T>
class ShardedVariable {
 public:
  //! `init` split into as many shards as `partitioner` decides.
  template <Partitioner P>
  ShardedVariable(const Tensor<T>& init, const P& partitioner)
      : ShardedVariable(init, static_cast<std::size_t>(partitioner(init.shape(), sizeof(T)))) {}
  //! `init` split into `shards` shards (at most one per row).
  ShardedVariable(const Tensor<T>& init, std::size_t shards) : shape_(init.shape()) {
    if (shards == 0) throw Error("ShardedVariable: a variable needs at least one shard");
    const std::size_t rows = detail::rows_of(shape_);
    if (rows > 0 && shards > rows)
      throw ShapeError("ShardedVariable: " + std::to_string(shards) + " shards for a variable of " +
                       std::to_string(rows) + " rows " + shape_.str() + "; a row is never split");
    rows_ = partition_rows(shape_, shards);
    const std::size_t row = rows ? shape_.elements() / rows : 0;
    for (const Range& r : rows_) {
      Tensor<T> s{shard_shape(r.size())};
      std::copy_n(init.data() + r.begin * row, s.size(), s.data());
      shards_.push_back(std::move(s));
    }
  }

  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t num_shards() const noexcept { return shards_.size(); }
  [[nodiscard]] const Tensor<T>& shard(std::size_t i) const { return shards_.at(i); }
  [[nodiscard]] Tensor<T>& shard(std::size_t i) { return shards_.at(i); }
  //! The rows of the whole that shard i holds.
  [[nodiscard]] Range rows(std::size_t i) const { return rows_.at(i); }
  //! The elements of the whole (flattened) that shard i holds.
  [[nodiscard]] Range elements(std::size_t i) const {
    const std::size_t n = detail::rows_of(shape_), row = n ? shape_.elements() / n : 0;
    return {rows_.at(i).begin * row, rows_.at(i).end * row};
  }
  //! The shard holding row `r`.
  [[nodiscard]] std::size_t shard_of_row(std::size_t r) const {
    for (std::size_t i = 0; i < rows_.size(); ++i)
      if (r >= rows_[i].begin && r < rows_[i].end) return i;
    throw Error("ShardedVariable::shard_of_row: row " + std::to_string(r) + " is outside " + shape_.str());
  }

  //! The whole value: the shards concatenated along the first axis.
  [[nodiscard]] Tensor<T> value() const {
    Tensor<T> out{shape_};
    T* o = out.data();
    for (const auto& s : shards_) o = std::copy_n(s.data(), s.size(), o);
    return out;
  }
  //! Sets the whole value (same shape); every shard gets its rows.
  void assign(const Tensor<T>& v) {
    if (v.shape() != shape_)
      throw ShapeError("ShardedVariable::assign: the variable is " + shape_.str() + ", the value " + v.shape().str());
    const T* in = v.data();
    for (auto& s : shards_) {
      std::copy_n(in, s.size(), s.data());
      in += s.size();
    }
  }

 private:
  [[nodiscard]] Shape shard_shape(std::size_t rows) const {
    if (shape_.rank() == 0) return shape_;
    std::vector<std::size_t> d = shape_.dims();
    d[0] = rows;
    return Shape(d);
  }

  Shape shape_;
  std::vector<Range> rows_;
  std::vector<Tensor<T>> shards_;
};

}  // namespace strata
