#pragma once
//! SliceTable: the tensors from_tensor_slices slices, from which rows and
//! batches of rows are copied.

#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/data/element.hpp>
#include <strata/tensor/shape.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::data::detail {

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

}  // namespace strata::data::detail
