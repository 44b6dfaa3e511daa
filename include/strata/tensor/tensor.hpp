#pragma once
//! Tensor<T, Space>: an owning, contiguous, row-major array with a shape, and
//! TensorView<T>, its non-owning counterpart.
//!   strata::Tensor<float> t{{2, 3}, 1.0f};   // 2x3 filled with ones
//!   t(1, 2) = 5.0f;  std::span<float> s = t.span();

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/concepts.hpp>
#include <strata/core/error.hpp>
#include <strata/tensor/shape.hpp>
#include <strata/tensor/space.hpp>

namespace strata {

//! A non-owning view of contiguous elements with a shape.
template <class T>
class TensorView {
 public:
  TensorView() = default;
  TensorView(T* data, Shape shape) : data_(data), shape_(std::move(shape)) {}

  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t size() const noexcept { return shape_.elements(); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::span<T> span() const noexcept { return {data_, size()}; }
  T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  Shape shape_;
};

//! Owning tensor of `T` elements in memory space `Space`. Copies are deep.
template <Element T, MemorySpace Space = HostSpace>
class Tensor {
 public:
  using value_type = T;
  using space_type = Space;

  Tensor() = default;

  //! Elements are value-initialized (zero); a space that is not host
  //! accessible zeroes them with its `zero(p, bytes)` hook.
  explicit Tensor(Shape shape) : shape_(std::move(shape)) {
    allocate();
    if constexpr (Space::host_accessible)
      std::fill(data_, data_ + size(), T{});
    else
      Space::zero(data_, bytes());
  }

  Tensor(Shape shape, T value)
    requires Space::host_accessible
      : shape_(std::move(shape)) {
    allocate();
    fill(value);
  }

  //! Takes the elements in row-major order; their count must match the shape.
  Tensor(Shape shape, std::initializer_list<T> values)
    requires Space::host_accessible
      : Tensor(std::move(shape), std::vector<T>(values)) {}

  Tensor(Shape shape, const std::vector<T>& values)
    requires Space::host_accessible
      : shape_(std::move(shape)) {
    if (values.size() != shape_.elements())
      throw ShapeError("Tensor: shape " + shape_.str() + " holds " + std::to_string(shape_.elements()) +
                       " elements but " + std::to_string(values.size()) + " values were given");
    allocate();
    std::copy(values.begin(), values.end(), data_);
  }

  Tensor(const Tensor& other) : shape_(other.shape_) {
    allocate();
    copy_bytes(data_, other.data_, bytes());
  }
  Tensor(Tensor&& other) noexcept
      : shape_(std::exchange(other.shape_, Shape{0})), data_(std::exchange(other.data_, nullptr)) {}
  Tensor& operator=(const Tensor& other) {
    if (this != &other) *this = Tensor(other);
    return *this;
  }
  Tensor& operator=(Tensor&& other) noexcept {
    std::swap(shape_, other.shape_);
    std::swap(data_, other.data_);
    return *this;
  }
  ~Tensor() { Space::deallocate(data_, bytes()); }

  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t size() const noexcept { return shape_.elements(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return size() * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }

  [[nodiscard]] std::span<T> span() noexcept
    requires Space::host_accessible
  { return {data_, size()}; }
  [[nodiscard]] std::span<const T> span() const noexcept
    requires Space::host_accessible
  { return {data_, size()}; }

  [[nodiscard]] TensorView<T> view() noexcept { return {data_, shape_}; }
  [[nodiscard]] TensorView<const T> view() const noexcept { return {data_, shape_}; }

  //! A view of the same elements with another shape of equal element count.
  [[nodiscard]] TensorView<T> reshaped(Shape shape) {
    check_reshape(shape);
    return {data_, std::move(shape)};
  }
  //! Changes the shape in place; the element count must not change.
  void reshape(Shape shape) {
    check_reshape(shape);
    shape_ = std::move(shape);
  }

  // A contiguous range: usable directly as a collective's buffer. Element
  // access needs a host-accessible space (a device tensor's elements are
  // read through to_host or a Compute's download).
  T* begin() noexcept
    requires Space::host_accessible
  { return data_; }
  T* end() noexcept
    requires Space::host_accessible
  { return data_ + size(); }
  const T* begin() const noexcept
    requires Space::host_accessible
  { return data_; }
  const T* end() const noexcept
    requires Space::host_accessible
  { return data_ + size(); }

  T& operator[](std::size_t i) noexcept
    requires Space::host_accessible
  { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept
    requires Space::host_accessible
  { return data_[i]; }

  //! Element at a multi-index, bounds-checked: t(i, j).
  template <std::integral... I>
    requires Space::host_accessible
  T& operator()(I... idx) { return data_[offset({static_cast<std::size_t>(idx)...})]; }
  template <std::integral... I>
    requires Space::host_accessible
  const T& operator()(I... idx) const { return data_[offset({static_cast<std::size_t>(idx)...})]; }

  void fill(T value)
    requires Space::host_accessible
  { std::fill(data_, data_ + size(), value); }

  //! Copies the elements of `src`, which must have the same shape.
  void copy_from(const Tensor& src) {
    if (src.shape_ != shape_)
      throw ShapeError("Tensor::copy_from: destination shape " + shape_.str() + " differs from source shape " +
                       src.shape_.str());
    copy_bytes(data_, src.data_, bytes());
  }

  //! Exact comparison: same shape and bitwise-equal values (NaN != NaN).
  friend bool operator==(const Tensor& a, const Tensor& b)
    requires Space::host_accessible
  { return a.shape_ == b.shape_ && std::equal(a.data_, a.data_ + a.size(), b.data_); }

 private:
  void allocate() { data_ = static_cast<T*>(Space::allocate(bytes())); }
  //! Within the space: its `copy(dst, src, bytes)` hook when it has one
  //! (device memory), else memcpy.
  static void copy_bytes(T* dst, const T* src, std::size_t n) {
    if (n == 0) return;
    if constexpr (requires { Space::copy(dst, src, n); })
      Space::copy(dst, src, n);
    else
      std::memcpy(dst, src, n);
  }

  void check_reshape(const Shape& s) const {
    if (s.elements() != size())
      throw ShapeError("Tensor::reshape: cannot view " + shape_.str() + " (" + std::to_string(size()) +
                       " elements) as " + s.str() + " (" + std::to_string(s.elements()) + " elements)");
  }

  std::size_t offset(std::initializer_list<std::size_t> idx) const {
    if (idx.size() != shape_.rank())
      throw ShapeError("Tensor: " + std::to_string(idx.size()) + " indices given for a tensor of rank " +
                       std::to_string(shape_.rank()));
    std::size_t off = 0, d = 0;
    for (auto i : idx) {
      if (i >= shape_[d])
        throw ShapeError("Tensor: index " + std::to_string(i) + " out of range for dimension " +
                         std::to_string(d) + " of shape " + shape_.str());
      off = off * shape_[d++] + i;
    }
    return off;
  }

  Shape shape_{0};
  T* data_ = nullptr;
};

//! Tolerances for allclose: |a - b| <= atol + rtol * |b|, as NumPy defines it.
struct Tolerance {
  double rtol = 1e-5;
  double atol = 1e-8;
};

namespace detail {
//! One pair of elements within `tol` (exact for integers).
template <Element T>
bool close(T x, T y, Tolerance tol) noexcept {
  if constexpr (std::is_floating_point_v<T>)
    return std::abs(static_cast<double>(x) - static_cast<double>(y)) <= tol.atol + tol.rtol * std::abs(static_cast<double>(y));
  else
    return x == y;
}
}  // namespace detail

//! True when shapes match and every pair of elements is within `tol`
//! (exact equality for integers; NaN is never close).
template <Element T, MemorySpace S>
  requires S::host_accessible
bool allclose(const Tensor<T, S>& a, const Tensor<T, S>& b, Tolerance tol = {}) {
  if (a.shape() != b.shape()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!detail::close(a[i], b[i], tol)) return false;
  return true;
}

}  // namespace strata
