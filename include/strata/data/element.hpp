#pragma once
//! What a Dataset yields (DatasetElement: a tensor or a tuple of tensors) and
//! the helpers that work on elements component by component.
//!   static_assert(strata::data::DatasetElement<strata::Tensor<float>>);

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/core/concepts.hpp>
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

}  // namespace detail

}  // namespace strata::data
