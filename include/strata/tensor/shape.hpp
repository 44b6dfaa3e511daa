#pragma once
//! The shape of a tensor: a small list of extents, row-major.

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace strata {

//! Extents of a row-major tensor. A shape with no extents is a scalar (one
//! element); any zero extent makes an empty tensor.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::size_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::size_t> dims) : dims_(std::move(dims)) {}

  [[nodiscard]] std::size_t rank() const noexcept { return dims_.size(); }
  [[nodiscard]] std::size_t operator[](std::size_t i) const { return dims_.at(i); }
  [[nodiscard]] const std::vector<std::size_t>& dims() const noexcept { return dims_; }

  //! Number of elements (the product of the extents; 1 for a scalar).
  [[nodiscard]] std::size_t elements() const noexcept {
    std::size_t n = 1;
    for (auto d : dims_) n *= d;
    return n;
  }

  //! "[2, 3]" — the form used in every error message.
  [[nodiscard]] std::string str() const {
    std::string s = "[";
    for (std::size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<std::size_t> dims_;
};

}  // namespace strata
