#pragma once
//! The map stage, and how it calls the function on an element.

#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <strata/data/detail/node.hpp>
#include <strata/data/element.hpp>

namespace strata::data::detail {

template <class F, class E>
struct UnpackInvocable : std::false_type {};
template <class F, class... C>
struct UnpackInvocable<F, std::tuple<C...>> : std::bool_constant<std::is_invocable_v<F&, C&&...>> {};
template <class F, class E>
struct UnpackInvocableLvalue : std::false_type {};
template <class F, class... C>
struct UnpackInvocableLvalue<F, std::tuple<C...>> : std::bool_constant<std::is_invocable_v<F&, C&...>> {};

//! How map calls F: with a tuple's components as separate arguments when F
//! takes them that way (as tf.data does), else with the whole element;
//! rvalues first, so that a by-value parameter steals the tensor.
enum class MapCall { none, unpack, unpack_lvalue, whole, whole_lvalue };
template <class F, class E>
constexpr MapCall map_call() {
  if constexpr (UnpackInvocable<F, E>::value) return MapCall::unpack;
  else if constexpr (UnpackInvocableLvalue<F, E>::value) return MapCall::unpack_lvalue;
  else if constexpr (std::is_invocable_v<F&, E&&>) return MapCall::whole;
  else if constexpr (std::is_invocable_v<F&, E&>) return MapCall::whole_lvalue;
  else return MapCall::none;
}

template <class F, class E>
decltype(auto) call_map(F& f, E&& e) {
  constexpr MapCall how = map_call<F, std::remove_cvref_t<E>>();
  if constexpr (how == MapCall::unpack) return std::apply(f, std::move(e));
  else if constexpr (how == MapCall::unpack_lvalue) return std::apply(f, e);
  else if constexpr (how == MapCall::whole) return f(std::move(e));
  else return f(e);
}

template <class F, class E>
using MapResult = std::remove_cvref_t<decltype(call_map(std::declval<F&>(), std::declval<E>()))>;

template <DatasetElement E, DatasetElement R, class F>
class MapNode final : public Node<R> {
  class Calls final : public Stream<R> {
   public:
    Calls(StreamPtr<E> up, F f) : up_(std::move(up)), f_(std::move(f)) {}
    std::optional<R> next() override {
      auto x = up_->next();
      if (!x) return std::nullopt;
      return std::optional<R>(call_map(f_, std::move(*x)));
    }

   private:
    StreamPtr<E> up_;
    F f_;
  };

 public:
  MapNode(NodePtr<E> up, F f) : up_(std::move(up)), f_(std::move(f)) {}
  // Each pass calls its own copy: a mutable function's state never races
  // between passes (a prefetch thread and the caller's), and restarts per pass.
  StreamPtr<R> open() const override { return std::make_unique<Calls>(up_->open(), f_); }
  Cardinality cardinality() const override { return up_->cardinality(); }
  NodePtr<R> shard_files(std::size_t num, std::size_t index) const override {
    auto up = up_->shard_files(num, index);
    return up ? std::make_shared<const MapNode>(std::move(up), f_) : nullptr;
  }

 void pass_counters(std::vector<std::uint64_t>& out) const override { up_->pass_counters(out); }
  void set_pass_counters(std::span<const std::uint64_t> in, std::size_t& at) const override {
    up_->set_pass_counters(in, at);
  }

  private:
  NodePtr<E> up_;
  F f_;
};

}  // namespace strata::data::detail
