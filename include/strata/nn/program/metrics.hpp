#pragma once
//! Metrics: each adds up a per-example quantity over a batch; the model
//! divides the total by the number of examples (so per-replica totals add up
//! exactly, in replica order).
//!   model.compile(opt, loss, {strata::nn::Accuracy{}, strata::nn::MeanLoss{strata::nn::MeanSquaredError{}}});

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/nn/program/losses.hpp>

namespace strata::nn {

class Metric {
 public:
  virtual ~Metric() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  //! Adds the sum of the metric's per-example values over the batch to *acc (a double in c's space).
  virtual void accumulate(Compute& c, const Act& pred, const Act& labels, double* acc, double* invalid) const = 0;
  //! Told the model's loss at compile time (Accuracy uses it to decide what labels mean).
  virtual void set_loss(const Loss&) {}
  [[nodiscard]] virtual std::unique_ptr<Metric> clone() const = 0;

  //! On host tensors: the sum of the metric's per-example values over the batch.
  [[nodiscard]] double total(const Tensor<float>& pred, const Tensor<float>& labels) const {
    Compute& c = kernels::host_compute();
    double sum = 0, invalid = 0;
    accumulate(c, detail::borrow_host(pred), detail::borrow_host(labels), &sum, &invalid);
    return sum;
  }
};

namespace detail {
//! Hits of class-index labels: per example ([batch, V] predictions), or, for
//! [batch, T, V] predictions or a masking `ignore`, per example the fraction
//! of its unmasked positions that are hits.
inline void sparse_hits(Compute& c, const Act& pred, const Act& labels, double* acc, double* invalid,
                        std::optional<int> ignore = std::nullopt) {
  if (pred.shape().rank() > 2 || ignore) {
    const kernels::SequenceLabels s = sequence_labels(pred, labels, ignore, "sparse_categorical_accuracy");
    if (s.batch) c.sequence_hits(pred.data(), labels.data(), s, acc, invalid);
    return;
  }
  const std::size_t b = pred.shape()[0], k = row_width(pred);
  if (labels.size() != b)
    throw ShapeError("sparse_categorical_accuracy: " + std::to_string(b) + " predictions but labels of shape " +
                     labels.shape().str());
  if (b) c.sparse_hits(pred.data(), labels.data(), b, k, acc, invalid);
}
inline void categorical_hits(Compute& c, const Act& pred, const Act& labels, double* acc) {
  if (labels.shape() != pred.shape())
    throw ShapeError("categorical_accuracy: labels of shape " + labels.shape().str() + " for predictions of shape " +
                     pred.shape().str());
  const std::size_t b = pred.shape()[0], k = row_width(pred);
  if (b) c.categorical_hits(pred.data(), labels.data(), b, k, acc);
}
}  // namespace detail

//! Fraction of examples whose predicted class (argmax) is the label index.
//! Per position for [batch, T, V] predictions: each example counts the
//! fraction of its positions that are hits, leaving out those whose label is
//! the compiled loss's ignore_class (an example with every position masked
//! counts 0).
class SparseCategoricalAccuracy final : public Metric {
 public:
  [[nodiscard]] std::string name() const override { return "sparse_categorical_accuracy"; }
  void set_loss(const Loss& l) override { ignore_ = l.ignore_class(); }
  void accumulate(Compute& c, const Act& p, const Act& y, double* acc, double* invalid) const override {
    detail::sparse_hits(c, p, y, acc, invalid, ignore_);
  }
  [[nodiscard]] std::unique_ptr<Metric> clone() const override { return std::make_unique<SparseCategoricalAccuracy>(*this); }

 private:
  std::optional<int> ignore_;
};

//! Fraction of examples whose argmax matches the one-hot label's argmax.
class CategoricalAccuracy final : public Metric {
 public:
  [[nodiscard]] std::string name() const override { return "categorical_accuracy"; }
  void accumulate(Compute& c, const Act& p, const Act& y, double* acc, double*) const override {
    detail::categorical_hits(c, p, y, acc);
  }
  [[nodiscard]] std::unique_ptr<Metric> clone() const override { return std::make_unique<CategoricalAccuracy>(*this); }
};

//! "accuracy" as Keras means it: sparse or categorical by the loss's labels
//! (sparse: per position, masked as SparseCategoricalAccuracy); for a single
//! output, binary at threshold 0.5.
class Accuracy final : public Metric {
 public:
  [[nodiscard]] std::string name() const override { return "accuracy"; }
  void set_loss(const Loss& l) override {
    sparse_ = l.sparse_labels();
    ignore_ = l.ignore_class();
  }
  void accumulate(Compute& c, const Act& p, const Act& y, double* acc, double* invalid) const override {
    if (sparse_) return detail::sparse_hits(c, p, y, acc, invalid, ignore_);
    if (detail::row_width(p) > 1) return detail::categorical_hits(c, p, y, acc);
    if (y.size() != p.size())
      throw ShapeError("accuracy: labels of shape " + y.shape().str() + " for predictions of shape " + p.shape().str());
    if (p.size()) c.binary_hits(p.data(), y.data(), p.size(), acc);
  }
  [[nodiscard]] std::unique_ptr<Metric> clone() const override { return std::make_unique<Accuracy>(*this); }

 private:
  bool sparse_ = false;
  std::optional<int> ignore_;
};

//! The mean of a loss, as a metric (e.g. track MSE while training on another loss).
class MeanLoss final : public Metric {
 public:
  template <std::derived_from<Loss> L>
  explicit MeanLoss(L loss) : loss_(std::make_shared<L>(std::move(loss))) {}
  [[nodiscard]] std::string name() const override { return loss_->name(); }
  void accumulate(Compute& c, const Act& p, const Act& y, double* acc, double* invalid) const override {
    loss_->accumulate(c, p, y, nullptr, 1.f, acc, invalid);
  }
  [[nodiscard]] std::unique_ptr<Metric> clone() const override { return std::make_unique<MeanLoss>(*this); }

 private:
  std::shared_ptr<const Loss> loss_;
};

namespace detail {

//! Where a replica's step adds its sums (a double each, in its compute's
//! memory): the loss, each metric, the loss's count of labels that name no
//! class, the gradient's non-finite count, then each metric's count of such
//! labels. Each sparse accumulator counts every bad label of the batch once,
//! so the counts are kept apart (one shared count would say "4 of 16" for 2).
struct StepSums {
  std::size_t metrics = 0;
  [[nodiscard]] std::size_t size() const noexcept { return 2 * metrics + 3; }
  [[nodiscard]] std::size_t loss_invalid() const noexcept { return metrics + 1; }
  [[nodiscard]] std::size_t nonfinite() const noexcept { return metrics + 2; }
  [[nodiscard]] std::size_t metric_invalid(std::size_t k) const noexcept { return metrics + 3 + k; }

  //! Adds the loss's and each metric's sums of the batch to `sums`.
  void accumulate(Compute& c, const Loss& loss, const std::vector<std::unique_ptr<Metric>>& ms, const Act& pred,
                  const Act& labels, Act* dpred, float scale, double* sums) const {
    loss.accumulate(c, pred, labels, dpred, scale, sums, sums + loss_invalid());
    for (std::size_t k = 0; k < metrics; ++k) ms[k]->accumulate(c, pred, labels, sums + 1 + k, sums + metric_invalid(k));
  }

  //! The count of bad labels in the read-back sums `s` and the accumulator
  //! that counted them (the loss first), or 0 and "".
  [[nodiscard]] std::pair<double, std::string> invalid(const double* s, const Loss& loss,
                                                       const std::vector<std::unique_ptr<Metric>>& ms) const {
    if (s[loss_invalid()] != 0) return {s[loss_invalid()], loss.name()};
    for (std::size_t k = 0; k < metrics; ++k)
      if (s[metric_invalid(k)] != 0) return {s[metric_invalid(k)], ms[k]->name()};
    return {0.0, ""};
  }
};

}  // namespace detail

}  // namespace strata::nn
