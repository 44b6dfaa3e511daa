#pragma once
//! Border handling of sliding-window layers (Conv2D, MaxPool2D), with the
//! TensorFlow/Keras semantics so that shapes and weights carry over.
//!   strata::nn::Conv2D conv(32, 3, {.padding = strata::nn::Padding::Same});
//!   auto w = strata::nn::detail::window_1d(28, 3, 2, strata::nn::Padding::Same);  // w.out == 14

#include <cstddef>

namespace strata::nn {

//! Valid: windows lie entirely inside the input, out = (in - k) / stride + 1.
//! Same: out = ceil(in / stride); the input is padded by
//! max((out - 1) * stride + k - in, 0), half of it (rounded down) before and
//! the rest after, so an odd padding puts the extra row/column at the bottom/right.
//!   strata::nn::MaxPool2D pool(2, {.padding = strata::nn::Padding::Same});
//!   std::string s = strata::nn::to_string(strata::nn::Padding::Same);   // "same"
enum class Padding { Valid, Same };

//! "valid" or "same", as Keras spells them (for summaries and error messages).
//!   std::string s = strata::nn::to_string(padding);
//!   throw strata::ShapeError("... with " + s + " padding");
constexpr const char* to_string(Padding p) noexcept { return p == Padding::Same ? "same" : "valid"; }

namespace detail {

//! Geometry of a window sliding along one axis.
struct Window1D {
  std::size_t out = 0;         //!< number of window positions
  std::size_t pad_before = 0;  //!< virtual elements in front of the input
};

//! Where a window of `k` moved by `stride` over `in` elements lands. Valid
//! padding needs in >= k and every argument needs to be positive: callers
//! check those first, to name the layer in their error.
constexpr Window1D window_1d(std::size_t in, std::size_t k, std::size_t stride, Padding p) noexcept {
  if (p == Padding::Valid) return {(in - k) / stride + 1, 0};
  const std::size_t out = (in + stride - 1) / stride;
  const std::size_t span = (out - 1) * stride + k;
  const std::size_t total = span > in ? span - in : 0;
  return {out, total / 2};
}

}  // namespace detail
}  // namespace strata::nn
