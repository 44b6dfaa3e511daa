#pragma once
//! How a model hands its data to an executor: a Pass (strategy/program.hpp)
//! whose batches and hooks are functions, and the small helpers that turn a
//! dataset's elements into float batches.
//!   strata::nn::detail::FnPass pass;  pass.next_fn = [&] { return next_batch(); };
//!   executor.run_pass(pass);

#include <concepts>
#include <cstddef>
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>

#include <strata/strategy/distributed.hpp>
#include <strata/strategy/program.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::nn::detail {

template <class T>
struct is_tensor : std::false_type {};
template <Element T>
struct is_tensor<Tensor<T>> : std::true_type {};
template <class T>
struct is_distributed : std::false_type {};
template <class D>
struct is_distributed<Distributed<D>> : std::true_type {};

//! A tensor as float: the tensor itself when it already is, else a converted copy.
template <class T>
const Tensor<float>& as_float(const Tensor<T>& t, Tensor<float>& holder) {
  if constexpr (std::same_as<T, float>) {
    return t;
  } else {
    if (holder.shape() != t.shape()) holder = Tensor<float>(t.shape());
    for (std::size_t i = 0; i < t.size(); ++i) holder[i] = static_cast<float>(t[i]);
    return holder;
  }
}

//! The features of a dataset element: the element itself, or its first part.
template <class E>
const auto& features_of(const E& e) {
  if constexpr (is_tensor<E>::value) return e;
  else return std::get<0>(e);
}

//! Whether `data` is each worker's own share of the global batches (sharded by file).
template <class D>
bool per_worker(const D& data) {
  if constexpr (is_distributed<D>::value) return data.per_worker;
  else return false;
}

//! A pass whose batches and hooks are functions.
struct FnPass final : Pass {
  std::function<std::optional<Batch>()> next_fn;
  std::function<Batch()> empty_fn;
  std::function<void(std::size_t)> begin_fn;
  std::function<bool(std::size_t, const PassTotals&)> end_fn;
  std::optional<Batch> next() override { return next_fn(); }
  Batch empty() override { return empty_fn(); }
  void begin_step(std::size_t s) override {
    if (begin_fn) begin_fn(s);
  }
  bool end_step(std::size_t s, const PassTotals& t) override { return end_fn && end_fn(s, t); }
};

}  // namespace strata::nn::detail
