#pragma once
//! Metrics: each adds up a per-example quantity over a batch; the model
//! divides the total by the number of examples (so per-replica totals add up
//! exactly, in replica order).
//!   model.compile(opt, loss, {strata::nn::Accuracy{}, strata::nn::MeanLoss{strata::nn::MeanSquaredError{}}});

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include <strata/nn/losses.hpp>

namespace strata::nn {

class Metric {
 public:
  virtual ~Metric() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  //! Sum of the metric's per-example values over the batch.
  [[nodiscard]] virtual double total(const Tensor<float>& pred, const Tensor<float>& labels) const = 0;
  //! Told the model's loss at compile time (Accuracy uses it to decide what labels mean).
  virtual void set_loss(const Loss&) {}
  [[nodiscard]] virtual std::unique_ptr<Metric> clone() const = 0;
};

namespace detail {
inline std::size_t argmax(const float* p, std::size_t n) {
  return static_cast<std::size_t>(std::max_element(p, p + n) - p);
}
inline double sparse_hits(const Tensor<float>& pred, const Tensor<float>& labels) {
  const std::size_t b = pred.shape()[0], c = row_width(pred);
  if (labels.size() != b)
    throw ShapeError("sparse_categorical_accuracy: " + std::to_string(b) + " predictions but labels of shape " +
                     labels.shape().str());
  double hits = 0;
  for (std::size_t i = 0; i < b; ++i) hits += static_cast<float>(argmax(pred.data() + i * c, c)) == labels[i];
  return hits;
}
inline double categorical_hits(const Tensor<float>& pred, const Tensor<float>& labels) {
  if (labels.shape() != pred.shape())
    throw ShapeError("categorical_accuracy: labels of shape " + labels.shape().str() + " for predictions of shape " +
                     pred.shape().str());
  const std::size_t b = pred.shape()[0], c = row_width(pred);
  double hits = 0;
  for (std::size_t i = 0; i < b; ++i) hits += argmax(pred.data() + i * c, c) == argmax(labels.data() + i * c, c);
  return hits;
}
}  // namespace detail

//! Fraction of examples whose predicted class (argmax) is the label index.
class SparseCategoricalAccuracy final : public Metric {
 public:
  [[nodiscard]] std::string name() const override { return "sparse_categorical_accuracy"; }
  [[nodiscard]] double total(const Tensor<float>& p, const Tensor<float>& y) const override {
    return detail::sparse_hits(p, y);
  }
  [[nodiscard]] std::unique_ptr<Metric> clone() const override { return std::make_unique<SparseCategoricalAccuracy>(*this); }
};

//! Fraction of examples whose argmax matches the one-hot label's argmax.
class CategoricalAccuracy final : public Metric {
 public:
  [[nodiscard]] std::string name() const override { return "categorical_accuracy"; }
  [[nodiscard]] double total(const Tensor<float>& p, const Tensor<float>& y) const override {
    return detail::categorical_hits(p, y);
  }
  [[nodiscard]] std::unique_ptr<Metric> clone() const override { return std::make_unique<CategoricalAccuracy>(*this); }
};

//! "accuracy" as Keras means it: sparse or categorical by the loss's labels;
//! for a single output, binary at threshold 0.5.
class Accuracy final : public Metric {
 public:
  [[nodiscard]] std::string name() const override { return "accuracy"; }
  void set_loss(const Loss& l) override { sparse_ = l.sparse_labels(); }
  [[nodiscard]] double total(const Tensor<float>& p, const Tensor<float>& y) const override {
    if (sparse_) return detail::sparse_hits(p, y);
    if (detail::row_width(p) > 1) return detail::categorical_hits(p, y);
    if (y.size() != p.size())
      throw ShapeError("accuracy: labels of shape " + y.shape().str() + " for predictions of shape " + p.shape().str());
    double hits = 0;
    for (std::size_t i = 0; i < p.size(); ++i) hits += (p[i] > 0.5f) == (y[i] > 0.5f);
    return hits;
  }
  [[nodiscard]] std::unique_ptr<Metric> clone() const override { return std::make_unique<Accuracy>(*this); }

 private:
  bool sparse_ = false;
};

//! The mean of a loss, as a metric (e.g. track MSE while training on another loss).
class MeanLoss final : public Metric {
 public:
  template <std::derived_from<Loss> L>
  explicit MeanLoss(L loss) : loss_(std::make_shared<L>(std::move(loss))) {}
  [[nodiscard]] std::string name() const override { return loss_->name(); }
  [[nodiscard]] double total(const Tensor<float>& p, const Tensor<float>& y) const override {
    return loss_->compute(p, y, nullptr, 1.f);
  }
  [[nodiscard]] std::unique_ptr<Metric> clone() const override { return std::make_unique<MeanLoss>(*this); }

 private:
  std::shared_ptr<const Loss> loss_;
};

}  // namespace strata::nn
