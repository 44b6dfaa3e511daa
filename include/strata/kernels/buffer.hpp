#pragma once
//! Buffer<T>: elements with a shape in the Memory (a Compute, or the host's
//! memory alone) that allocated it (host or a GPU); what layers pass between
//! them. Host code never dereferences one: elements are read through Memory::download, or
//! on the host through host_span(), which refuses a device buffer.
//!   strata::kernels::Buffer<float> y;  y.resize(c, strata::Shape{batch, 10});   // reallocates only to grow
//! A borrowed buffer (Buffer::borrow) views memory it does not own.

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include <strata/core/error.hpp>
#include <strata/kernels/memory.hpp>
#include <strata/tensor/shape.hpp>

namespace strata::kernels {

template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Memory& c, Shape shape) { resize(c, std::move(shape)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~Buffer() { release(); }

  //! A view of `data` (in `c`'s space) that is not freed with the buffer.
  static Buffer borrow(Memory& c, T* data, Shape shape) {
    Buffer b;
    b.c_ = &c;
    b.data_ = data;
    b.shape_ = std::move(shape);
    return b;
  }

  //! Gives the buffer `shape` in `c`'s space; the elements are unspecified
  //! after a reallocation, which happens only when the capacity is short
  //! (or the space changes). A borrowed buffer must already be large enough.
  void resize(Memory& c, Shape shape) {
    const std::size_t n = shape.elements();
    if (c_ != &c || n > capacity_) {
      if (borrowed()) {
        if (c_ == &c && n <= shape_.elements()) {
          shape_ = std::move(shape);
          return;
        }
        throw ShapeError("Buffer: a borrowed buffer of " + shape_.str() + " cannot grow to " + shape.str());
      }
      release();
      data_ = static_cast<T*>(c.allocate(n * sizeof(T)));
      capacity_ = n;
      c_ = &c;
    }
    shape_ = std::move(shape);
  }

  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t size() const noexcept { return shape_.elements(); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  //! The memory it lives in (null before the first resize).
  [[nodiscard]] Memory* memory() const noexcept { return c_; }
  //! Changes the shape; the element count must not grow.
  void reshape(Shape s) {
    if (s.elements() > (borrowed() ? shape_.elements() : capacity_))
      throw ShapeError("Buffer::reshape: " + s.str() + " does not fit in " + shape_.str());
    shape_ = std::move(s);
  }
  //! The elements, for host code: only a host buffer has them at hand.
  [[nodiscard]] std::span<T> host_span() const {
    if (c_ && c_->where() != Where::Host)
      throw Error("Buffer: the elements of a buffer on " + c_->name() +
                  " are not addressable from the host; download them (Memory::download)");
    return {data_, size()};
  }

 private:
  [[nodiscard]] bool borrowed() const noexcept { return data_ && capacity_ == 0; }
  void release() noexcept {
    if (c_ && capacity_) c_->deallocate(data_, capacity_ * sizeof(T));
    data_ = nullptr;
    capacity_ = 0;
  }
  void swap(Buffer& o) noexcept {
    std::swap(c_, o.c_);
    std::swap(data_, o.data_);
    std::swap(shape_, o.shape_);
    std::swap(capacity_, o.capacity_);
  }

  Memory* c_ = nullptr;
  T* data_ = nullptr;
  Shape shape_{0};
  std::size_t capacity_ = 0;  // 0 with data: borrowed
};

//! A layer's working memory (caches between forward and backward): a Buffer
//! whose copies start empty, so a cloned layer owns its own.
//!   strata::kernels::Scratch<float> dz_;   dz_.resize(c, dy.shape());
template <class T>
class Scratch : public Buffer<T> {
 public:
  Scratch() = default;
  Scratch(const Scratch&) : Buffer<T>() {}
  Scratch& operator=(const Scratch&) { return *this; }
  Scratch(Scratch&&) noexcept = default;
  Scratch& operator=(Scratch&&) noexcept = default;
  ~Scratch() = default;
};

}  // namespace strata::kernels
