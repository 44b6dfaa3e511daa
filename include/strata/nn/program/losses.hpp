#pragma once
//! Losses. Each returns the SUM of per-example losses over the batch and
//! writes `scale` * d(sum)/d(pred). The model passes scale = 1 / global batch
//! size, so gradients summed over replicas are the gradient of the mean loss
//! over the global batch — the same as one replica on the whole batch (a
//! per-replica mean would weight each replica's examples by p instead).
//!   model.compile(strata::nn::Adam{1e-3}, strata::nn::SparseCategoricalCrossentropy{{.from_logits = true}});
//! Labels arrive as float tensors: class indices for the sparse loss,
//! one-hot / probabilities for the categorical one, targets for MSE. A
//! sequence model's per-position loss (predictions [batch, T, V], labels
//! [batch, T]) is the sparse loss's too: per example, the mean over its
//! positions (those whose label is not the ignore_class). The
//! arithmetic is the compute vocabulary's (kernels/compute.hpp), so a loss
//! runs where its replica runs; shapes are checked here, on the host.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>

#include <strata/core/error.hpp>
#include <strata/kernels/host/losses.hpp>
#include <strata/nn/layers/layer.hpp>

namespace strata::nn {

class Loss {
 public:
  virtual ~Loss() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  //! Adds the sum of per-example losses to *acc (a double in c's space);
  //! if `dpred` is not null, it receives scale * d(sum)/d(pred) with pred's
  //! shape. Labels that are not class indices: see Compute::sparse_crossentropy.
  virtual void accumulate(Compute& c, const Act& pred, const Act& labels, Act* dpred, float scale, double* acc,
                          double* invalid) const = 0;
  //! Whether labels are class indices (decides what Accuracy means).
  [[nodiscard]] virtual bool sparse_labels() const noexcept { return false; }
  //! The label value that masks a position out (SparseCategoricalCrossentropy's
  //! ignore_class), if any: the sparse accuracies leave those positions out too.
  [[nodiscard]] virtual std::optional<int> ignore_class() const { return std::nullopt; }

  //! On host tensors: the sum of per-example losses; `dpred` as accumulate.
  double compute(const Tensor<float>& pred, const Tensor<float>& labels, Tensor<float>* dpred, float scale) const {
    Compute& c = kernels::host_compute();
    Act d;
    double sum = 0, invalid = 0;
    accumulate(c, detail::borrow_host(pred), detail::borrow_host(labels), dpred ? &d : nullptr, scale, &sum, &invalid);
    if (dpred) detail::store_host(d, *dpred);
    return sum;
  }
};

namespace detail {
//! Per-sample width of a [batch, ...] prediction (1 for a rank-1 one).
inline std::size_t row_width(const Act& t) { return t.shape()[0] ? t.size() / t.shape()[0] : 1; }

inline void prepare_grad(Compute& c, const Act& pred, Act* d) {
  if (d) d->resize(c, pred.shape());
}

//! The per-position layout of sparse labels for predictions [batch, T..., V]
//! with labels [batch, T...] (T... may be empty: one position per example),
//! or a ShapeError from `who` saying what was expected.
inline kernels::SequenceLabels sequence_labels(const Act& pred, const Act& labels, std::optional<int> ignore,
                                               const std::string& who) {
  const Shape& p = pred.shape();
  const Shape& l = labels.shape();
  const bool per_example = p.rank() == 2 && labels.size() == p[0];
  const bool per_position = p.rank() >= 3 && l.rank() == p.rank() - 1 &&
                            std::equal(l.dims().begin(), l.dims().end(), p.dims().begin());
  if (!per_example && !per_position)
    throw ShapeError(who + ": predictions of shape " + p.str() + " but labels of shape " + l.str() +
                     "; expected the predictions' shape without its last axis (one class index per position)");
  kernels::SequenceLabels s;
  s.batch = p[0];
  s.classes = p.dims().back();
  s.steps = per_example ? 1 : l.elements() / std::max<std::size_t>(1, s.batch);
  if (per_position && s.batch == 0) s.steps = 1;
  if (ignore) {
    s.masked = true;
    s.ignore_class = static_cast<float>(*ignore);
  }
  return s;
}
}  // namespace detail

struct CrossentropyOptions {
  bool from_logits = false;  //!< as Keras: predictions are probabilities unless told otherwise
};

//! SparseCategoricalCrossentropy's options: CrossentropyOptions' and Keras' ignore_class.
struct SparseCrossentropyOptions {
  bool from_logits = false;  //!< as Keras: predictions are probabilities unless told otherwise
  //! A label equal to it masks its position out (Keras' ignore_class; e.g. -1 for padding).
  std::optional<int> ignore_class = std::nullopt;
};

//! Cross-entropy against integer class labels: one per example (predictions
//! [batch, V], labels [batch] or [batch, 1]) or one per position (predictions
//! [batch, T, V], labels [batch, T]: a sequence model's next-token loss).
//! Per position, an example's loss is the mean over its unmasked positions
//! (labels other than ignore_class) of their cross-entropies, so that the
//! scale contract above holds per example; an example with every position
//! masked adds 0 to the sum and gets no gradient (it still counts in the
//! batch the model divides by). With ignore_class set, [batch] labels are
//! masked the same way (one position per example).
//!   strata::nn::SparseCategoricalCrossentropy{{.from_logits = true, .ignore_class = -1}}
class SparseCategoricalCrossentropy final : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(SparseCrossentropyOptions o = {}) : o_(o) {}
  [[nodiscard]] std::string name() const override { return "sparse_categorical_crossentropy"; }
  [[nodiscard]] bool sparse_labels() const noexcept override { return true; }
  [[nodiscard]] std::optional<int> ignore_class() const override { return o_.ignore_class; }

  void accumulate(Compute& c, const Act& pred, const Act& labels, Act* d, float scale, double* acc,
                  double* invalid) const override {
    const std::size_t b = pred.shape()[0], k = detail::row_width(pred);
    if (pred.shape().rank() <= 2 && !o_.ignore_class) {  // one label per example: as it always was
      if (labels.size() != b)
        throw ShapeError(name() + ": " + std::to_string(b) + " predictions but labels of shape " +
                         labels.shape().str() + "; expected one class index per example");
      detail::prepare_grad(c, pred, d);
      if (b) c.sparse_crossentropy(pred.data(), labels.data(), d ? d->data() : nullptr, scale, b, k, o_.from_logits,
                                   acc, invalid);
      return;
    }
    const kernels::SequenceLabels s = detail::sequence_labels(pred, labels, o_.ignore_class, name());
    detail::prepare_grad(c, pred, d);
    if (b) c.sequence_crossentropy(pred.data(), labels.data(), d ? d->data() : nullptr, scale, s, o_.from_logits, acc,
                                   invalid);
  }

 private:
  SparseCrossentropyOptions o_;
};

//! Cross-entropy against one-hot (or probability) labels of the prediction's shape.
class CategoricalCrossentropy final : public Loss {
 public:
  explicit CategoricalCrossentropy(CrossentropyOptions o = {}) : o_(o) {}
  [[nodiscard]] std::string name() const override { return "categorical_crossentropy"; }

  void accumulate(Compute& c, const Act& pred, const Act& labels, Act* d, float scale, double* acc,
                  double* /*invalid*/) const override {
    if (labels.shape() != pred.shape())
      throw ShapeError(name() + ": labels of shape " + labels.shape().str() + " for predictions of shape " +
                       pred.shape().str() + "; expected one-hot labels of the same shape");
    const std::size_t b = pred.shape()[0], k = detail::row_width(pred);
    detail::prepare_grad(c, pred, d);
    if (b) c.categorical_crossentropy(pred.data(), labels.data(), d ? d->data() : nullptr, scale, b, k, o_.from_logits,
                                      acc);
  }

 private:
  CrossentropyOptions o_;
};

//! Mean over each example's elements of (pred - label)^2.
class MeanSquaredError final : public Loss {
 public:
  [[nodiscard]] std::string name() const override { return "mean_squared_error"; }
  void accumulate(Compute& c, const Act& pred, const Act& labels, Act* d, float scale, double* acc,
                  double* /*invalid*/) const override {
    if (labels.size() != pred.size())
      throw ShapeError(name() + ": labels of shape " + labels.shape().str() + " for predictions of shape " +
                       pred.shape().str());
    const std::size_t b = pred.shape()[0], w = detail::row_width(pred);
    detail::prepare_grad(c, pred, d);
    if (b) c.mean_squared_error(pred.data(), labels.data(), d ? d->data() : nullptr, scale, b, w, acc);
  }
};

}  // namespace strata::nn
