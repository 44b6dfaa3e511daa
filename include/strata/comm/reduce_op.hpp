#pragma once
//! Reduction operations (Sum, Mean, Min, Max, Product) as tag objects, and
//! the elementwise kernels every algorithm uses. Tags rather than an enum so
//! that each kernel is generated for its operation and so that MEAN over
//! integers is rejected at compile time.
//!   ctx.all_reduce(grad, strata::Mean);   // average over the replicas

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>

#include <strata/core/concepts.hpp>
#include <strata/core/host_device.hpp>

namespace strata {

namespace detail {
enum class OpKind : unsigned char { sum, mean, min, max, product };
}  // namespace detail

//! Sum of the replicas' values.
struct SumOp {
  using reduce_operation = SumOp;
  static constexpr detail::OpKind kind = detail::OpKind::sum;
  static constexpr std::string_view name = "sum";
  template <class T> STRATA_HD static constexpr T combine(T a, T b) noexcept { return a + b; }
};
//! Arithmetic mean: the sum divided by the number of replicas (floating point only).
struct MeanOp {
  using reduce_operation = MeanOp;
  static constexpr detail::OpKind kind = detail::OpKind::mean;
  static constexpr std::string_view name = "mean";
  template <class T> STRATA_HD static constexpr T combine(T a, T b) noexcept { return a + b; }
};
//! Elementwise minimum.
struct MinOp {
  using reduce_operation = MinOp;
  static constexpr detail::OpKind kind = detail::OpKind::min;
  static constexpr std::string_view name = "min";
  template <class T> STRATA_HD static constexpr T combine(T a, T b) noexcept { return b < a ? b : a; }
};
//! Elementwise maximum.
struct MaxOp {
  using reduce_operation = MaxOp;
  static constexpr detail::OpKind kind = detail::OpKind::max;
  static constexpr std::string_view name = "max";
  template <class T> STRATA_HD static constexpr T combine(T a, T b) noexcept { return a < b ? b : a; }
};
//! Elementwise product.
struct ProductOp {
  using reduce_operation = ProductOp;
  static constexpr detail::OpKind kind = detail::OpKind::product;
  static constexpr std::string_view name = "product";
  template <class T> STRATA_HD static constexpr T combine(T a, T b) noexcept { return a * b; }
};

inline constexpr SumOp Sum{};
inline constexpr MeanOp Mean{};
inline constexpr MinOp Min{};
inline constexpr MaxOp Max{};
inline constexpr ProductOp Product{};

namespace detail {
//! The operation of kind K (what a kernel templated on the kind combines with).
template <OpKind K>
using op_of = std::tuple_element_t<static_cast<std::size_t>(K), std::tuple<SumOp, MeanOp, MinOp, MaxOp, ProductOp>>;
}  // namespace detail

//! A type that opts into being a reduction operation.
template <class O>
concept ReduceOperation = std::same_as<typename O::reduce_operation, O>;

namespace detail {

inline constexpr std::string_view op_name(OpKind k) noexcept {
  switch (k) {
    case OpKind::sum: return "sum";
    case OpKind::mean: return "mean";
    case OpKind::min: return "min";
    case OpKind::max: return "max";
    case OpKind::product: return "product";
  }
  return "?";
}

//! The compile-time check each collective makes on its operation and type.
template <ReduceOperation Op, WireElement T>
constexpr void check_op() {
  static_assert(!(std::same_as<Op, MeanOp> && std::integral<T>),
                "strata: MEAN over integer elements is ambiguous (integer division truncates); "
                "reduce with strata::Sum and divide as you intend, or use float or double elements");
  static_assert(!Half16<T> || std::same_as<Op, SumOp>,
                "strata: 16-bit elements (strata::bf16, strata::fp16) reduce with strata::Sum only (summed in "
                "FP32, rounded once per step of the algorithm); expand them to float for other operations");
}

//! acc[i] = combine(acc[i], src[i]) for i < n.
template <ReduceOperation Op, class T>
inline void combine_into(T* __restrict acc, const T* __restrict src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] = Op::combine(acc[i], src[i]);
}

//! dst[i] = combine(a[i], b[i]); dst may alias a (not b).
template <ReduceOperation Op, class T>
inline void combine_to(T* dst, const T* a, const T* __restrict b, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Op::combine(a[i], b[i]);
}

//! The last step of MEAN: divide by the number of contributions.
template <ReduceOperation Op, class T>
inline void finalize(T* data, std::size_t n, std::size_t contributors) noexcept {
  if constexpr (std::same_as<Op, MeanOp>) {
    const T d = static_cast<T>(contributors);
    for (std::size_t i = 0; i < n; ++i) data[i] /= d;
  }
}

//! Reduces elements [begin, end) of the p inputs in replica order (so the
//! result is bitwise identical run to run) and writes the result to each of
//! the `nout` outputs. Works through a small block on the stack so that
//! in-place calls (outputs that alias inputs) are safe and each input and
//! output line is touched exactly once.
//! 16-bit elements (Sum only) add in FP32 in replica order, rounded once.
template <ReduceOperation Op, class T>
void reduce_range(const T* const* in, std::size_t p, T* const* out, std::size_t nout, std::size_t begin,
                  std::size_t end, std::size_t contributors) noexcept {
  if constexpr (Half16<T>) {
    (void)contributors;  // no MEAN over them
    constexpr std::size_t block = 1024;
    alignas(64) float acc[block];
    alignas(64) T rounded[block];
    for (std::size_t b = begin; b < end; b += block) {
      const std::size_t n = std::min(block, end - b);
      for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<float>(in[0][b + i]);
      for (std::size_t s = 1; s < p; ++s)
        for (std::size_t i = 0; i < n; ++i) acc[i] += static_cast<float>(in[s][b + i]);
      for (std::size_t i = 0; i < n; ++i) rounded[i] = T(acc[i]);
      for (std::size_t o = 0; o < nout; ++o) std::copy_n(rounded, n, out[o] + b);
    }
  } else {
    constexpr std::size_t block = 4096 / sizeof(T);
    alignas(64) T acc[block];
    for (std::size_t b = begin; b < end; b += block) {
      const std::size_t n = std::min(block, end - b);
      if (p == 1) {
        std::copy_n(in[0] + b, n, acc);
      } else {
        combine_to<Op>(acc, in[0] + b, in[1] + b, n);
        for (std::size_t s = 2; s < p; ++s) combine_into<Op>(acc, in[s] + b, n);
      }
      finalize<Op>(acc, n, contributors);
      for (std::size_t o = 0; o < nout; ++o) std::copy_n(acc, n, out[o] + b);
    }
  }
}

}  // namespace detail
}  // namespace strata
