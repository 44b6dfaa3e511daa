#pragma once
//! How a model hands its data to an executor: a Pass (execution/program.hpp)
//! whose batches and hooks are functions, and the small helpers that turn a
//! dataset's elements into float batches.
//!   strata::nn::detail::FnPass pass;  pass.next_fn = [&] { return next_batch(); };
//!   executor.run_pass(pass);

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include <strata/core/trace.hpp>
#include <strata/strategy/distributed.hpp>
#include <strata/execution/program.hpp>
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

//! The dataset of `data` (a dataset, or one distributed by `strategy`, the
//! model's: another strategy's is an error).
template <class D>
const auto& dataset_of(const D& data, const AnyStrategy* strategy) {
  if constexpr (is_distributed<D>::value) {
    if (data.strategy != strategy)
      throw Error("Sequential: the dataset was distributed by another strategy than the one this model was made "
                  "under; make the model inside that strategy's scope");
    return data.dataset;
  } else {
    return data;
  }
}

//! A pass whose batches and hooks are functions. In the trace (core/
//! trace.hpp): each batch taken ("data"), each step from begin_step to
//! end_step ("step", on the thread that drives the pass), and the hooks
//! ("callback").
struct FnPass final : Pass {
  std::function<std::optional<Batch>()> next_fn;
  std::function<Batch()> empty_fn;
  std::function<void(std::size_t)> begin_fn;
  std::function<bool(std::size_t, const PassTotals&)> end_fn;
  std::optional<Batch> next() override {
    trace::Span span{"next batch", trace::Category::Data};
    return next_fn();
  }
  Batch empty() override { return empty_fn(); }
  void begin_step(std::size_t s) override {
    if (begin_fn) {
      trace::Span span{"on_batch_begin", trace::Category::Callback, {{"step", s}}};
      begin_fn(s);
    }
    step_span_.reset();
    if (trace::enabled())
      step_span_ = std::make_unique<trace::Span>(
          phase == Phase::Train ? "train step" : phase == Phase::Evaluate ? "test step" : "predict step",
          trace::Category::Step, std::initializer_list<trace::Arg>{{"step", s}});
  }
  bool end_step(std::size_t s, const PassTotals& t) override {
    step_span_.reset();
    if (!end_fn) return false;
    trace::Span span{"on_batch_end", trace::Category::Callback, {{"step", s}}};
    return end_fn(s, t);
  }

 private:
  std::unique_ptr<trace::Span> step_span_;  // only while tracing
};

//! A model's side of its passes over a dataset: each batch checked
//! (training and evaluation: features and labels with one batch extent)
//! and converted to float, kept in one of `slots` places that next() uses
//! in turn (so the last `slots` batches stay valid: Pass::
//! steps_per_execution), and an empty share shaped like the data for a
//! worker out of it.
//!   detail::BatchFeed feed;  FnPass pass = feed.pass(it, [&](const Shape& s) { build(s); }, [&] { return input; }, 4);
struct BatchFeed {
  std::vector<std::size_t> label_tail;  // a label's shape past the batch axis (for an empty share)

  //! The pass over iterator `it`'s (features, labels) batches (phase and
  //! counters set by the caller), `slots` kept valid at once:
  //! `build(sample shape)` before each batch is handed over; `input()` the
  //! model's per-sample input shape, built, for an empty share.
  template <class It, class Build, class Input>
  FnPass pass(It& it, Build build, Input input, std::size_t slots = 1) {
    FnPass pass;
    pass.steps_per_execution = std::max<std::size_t>(slots, 1);
    auto ring = std::make_shared<Ring<std::remove_cvref_t<decltype(*it.next())>>>(pass.steps_per_execution);
    pass.next_fn = [this, &it, ring, build]() -> std::optional<Batch> {
      auto& [e, x_holder, y_holder] = ring->next_slot();
      if (!(e = it.next())) return std::nullopt;
      const Tensor<float>& x = as_float(std::get<0>(*e), x_holder);
      const Tensor<float>& y = as_float(std::get<1>(*e), y_holder);
      if (x.shape().rank() == 0 || y.shape().rank() == 0 || x.shape()[0] != y.shape()[0])
        throw ShapeError("Sequential: a batch's features " + x.shape().str() + " and labels " + y.shape().str() +
                         " must have the same first (batch) extent");
      build(sample_shape(x.shape()));
      label_tail.assign(y.shape().dims().begin() + 1, y.shape().dims().end());
      return Batch{&x, &y, nullptr};  // into the slot, which lives until next_fn comes back to it
    };
    pass.empty_fn = [this, ring, input] {
      const Shape in = input();
      std::vector<std::size_t> xd{0}, yd{0};
      xd.insert(xd.end(), in.dims().begin(), in.dims().end());
      yd.insert(yd.end(), label_tail.begin(), label_tail.end());
      ring->x_empty = Tensor<float>{Shape(xd)};
      ring->y_empty = Tensor<float>{Shape(yd)};
      return Batch{&ring->x_empty, &ring->y_empty, nullptr};
    };
    return pass;
  }

  //! A prediction pass over iterator `it`'s batches (features alone, or
  //! (features, labels...) whose labels are ignored), `slots` kept valid at
  //! once: `build(sample shape)` before each batch is handed over, its
  //! outputs written to a tensor of `outputs(rows)` (rows x the model's
  //! per-sample output) appended to `parts`.
  template <class It, class Build, class Outputs>
  FnPass predict_pass(It& it, Build build, Outputs outputs, std::vector<Tensor<float>>& parts, std::size_t slots = 1) {
    FnPass pass;
    pass.phase = Phase::Predict;
    pass.steps_per_execution = std::max<std::size_t>(slots, 1);
    auto ring = std::make_shared<Ring<std::remove_cvref_t<decltype(*it.next())>>>(pass.steps_per_execution);
    pass.next_fn = [&it, ring, build, outputs, &parts]() -> std::optional<Batch> {
      auto& [e, x_holder, unused] = ring->next_slot();
      if (!(e = it.next())) return std::nullopt;
      const Tensor<float>& x = as_float(features_of(*e), x_holder);
      build(sample_shape(x.shape()));
      parts.push_back(outputs(x.shape()[0]));  // a tensor's values stay where they are when parts grows
      return Batch{&x, nullptr, parts.back().data()};
    };
    return pass;
  }

 private:
  //! The places of the last batches: each an element and its float copies (where it needed converting).
  template <class E>
  struct Ring {
    explicit Ring(std::size_t n) : slots(n) {}
    std::tuple<std::optional<E>, Tensor<float>, Tensor<float>>& next_slot() { return slots[at++ % slots.size()]; }
    std::vector<std::tuple<std::optional<E>, Tensor<float>, Tensor<float>>> slots;
    std::size_t at = 0;
    Tensor<float> x_empty, y_empty;
  };
};

}  // namespace strata::nn::detail
