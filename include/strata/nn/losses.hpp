#pragma once
//! Losses. Each returns the SUM of per-example losses over the batch and
//! writes `scale` * d(sum)/d(pred). The model passes scale = 1 / global batch
//! size, so gradients summed over replicas are the gradient of the mean loss
//! over the global batch — the same as one replica on the whole batch (a
//! per-replica mean would weight each replica's examples by p instead).
//!   model.compile(strata::nn::Adam{1e-3}, strata::nn::SparseCategoricalCrossentropy{{.from_logits = true}});
//! Labels arrive as float tensors: class indices for the sparse loss,
//! one-hot / probabilities for the categorical one, targets for MSE.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include <strata/core/error.hpp>
#include <strata/nn/layer.hpp>

namespace strata::nn {

class Loss {
 public:
  virtual ~Loss() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  //! Sum of per-example losses; if `dpred` is not null, it receives
  //! scale * d(sum)/d(pred) with pred's shape.
  virtual double compute(const Tensor<float>& pred, const Tensor<float>& labels, Tensor<float>* dpred,
                         float scale) const = 0;
  //! Whether labels are class indices (decides what Accuracy means).
  [[nodiscard]] virtual bool sparse_labels() const noexcept { return false; }
};

namespace detail {
//! Per-sample width of a [batch, ...] prediction (1 for a rank-1 one).
inline std::size_t row_width(const Tensor<float>& t) { return t.shape()[0] ? t.size() / t.shape()[0] : 1; }

inline void prepare_grad(const Tensor<float>& pred, Tensor<float>* d) {
  if (!d) return;
  if (d->shape() != pred.shape()) *d = Tensor<float>(pred.shape());
}

inline std::size_t class_index(float label, std::size_t classes, std::size_t row) {
  const auto k = static_cast<long long>(label);
  if (static_cast<float>(k) != label || k < 0 || static_cast<std::size_t>(k) >= classes)
    throw Error("SparseCategoricalCrossentropy: label " + std::to_string(label) + " of example " +
                std::to_string(row) + " is not a class index in [0, " + std::to_string(classes) + ")");
  return static_cast<std::size_t>(k);
}

constexpr float prob_epsilon = 1e-7f;  // as Keras: probabilities are clipped to [eps, 1 - eps]
}  // namespace detail

struct CrossentropyOptions {
  bool from_logits = false;  //!< as Keras: predictions are probabilities unless told otherwise
};

//! Cross-entropy against integer class labels ([batch] or [batch, 1]).
class SparseCategoricalCrossentropy final : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(CrossentropyOptions o = {}) : o_(o) {}
  [[nodiscard]] std::string name() const override { return "sparse_categorical_crossentropy"; }
  [[nodiscard]] bool sparse_labels() const noexcept override { return true; }

  double compute(const Tensor<float>& pred, const Tensor<float>& labels, Tensor<float>* d,
                 float scale) const override {
    const std::size_t b = pred.shape()[0], c = detail::row_width(pred);
    if (labels.size() != b)
      throw ShapeError(name() + ": " + std::to_string(b) + " predictions but labels of shape " + labels.shape().str() +
                       "; expected one class index per example");
    detail::prepare_grad(pred, d);
    double total = 0;
    for (std::size_t i = 0; i < b; ++i) {
      const float* p = pred.data() + i * c;
      const std::size_t k = detail::class_index(labels[i], c, i);
      if (o_.from_logits) {
        // log-softmax with the maximum subtracted: never overflows
        const float m = *std::max_element(p, p + c);
        float sum = 0.f;
        for (std::size_t j = 0; j < c; ++j) sum += std::exp(p[j] - m);
        const float lse = m + std::log(sum);
        total += static_cast<double>(lse - p[k]);
        if (d) {
          float* g = d->data() + i * c;
          for (std::size_t j = 0; j < c; ++j) g[j] = scale * std::exp(p[j] - lse);
          g[k] -= scale;
        }
      } else {
        const float pk = std::clamp(p[k], detail::prob_epsilon, 1.f - detail::prob_epsilon);
        total += -std::log(static_cast<double>(pk));
        if (d) {
          float* g = d->data() + i * c;
          std::fill_n(g, c, 0.f);
          if (p[k] == pk) g[k] = -scale / pk;  // clipped: no gradient, as Keras
        }
      }
    }
    return total;
  }

 private:
  CrossentropyOptions o_;
};

//! Cross-entropy against one-hot (or probability) labels of the prediction's shape.
class CategoricalCrossentropy final : public Loss {
 public:
  explicit CategoricalCrossentropy(CrossentropyOptions o = {}) : o_(o) {}
  [[nodiscard]] std::string name() const override { return "categorical_crossentropy"; }

  double compute(const Tensor<float>& pred, const Tensor<float>& labels, Tensor<float>* d,
                 float scale) const override {
    if (labels.shape() != pred.shape())
      throw ShapeError(name() + ": labels of shape " + labels.shape().str() + " for predictions of shape " +
                       pred.shape().str() + "; expected one-hot labels of the same shape");
    const std::size_t b = pred.shape()[0], c = detail::row_width(pred);
    detail::prepare_grad(pred, d);
    double total = 0;
    for (std::size_t i = 0; i < b; ++i) {
      const float* p = pred.data() + i * c;
      const float* y = labels.data() + i * c;
      float* g = d ? d->data() + i * c : nullptr;
      if (o_.from_logits) {
        const float m = *std::max_element(p, p + c);
        float sum = 0.f, ysum = 0.f;
        for (std::size_t j = 0; j < c; ++j) sum += std::exp(p[j] - m);
        const float lse = m + std::log(sum);
        for (std::size_t j = 0; j < c; ++j) {
          total += static_cast<double>(y[j] * (lse - p[j]));
          ysum += y[j];
        }
        if (g)
          for (std::size_t j = 0; j < c; ++j) g[j] = scale * (ysum * std::exp(p[j] - lse) - y[j]);
      } else {
        for (std::size_t j = 0; j < c; ++j) {
          const float pj = std::clamp(p[j], detail::prob_epsilon, 1.f - detail::prob_epsilon);
          total += -static_cast<double>(y[j]) * std::log(static_cast<double>(pj));
          if (g) g[j] = p[j] == pj ? -scale * y[j] / pj : 0.f;
        }
      }
    }
    return total;
  }

 private:
  CrossentropyOptions o_;
};

//! Mean over each example's elements of (pred - label)^2.
class MeanSquaredError final : public Loss {
 public:
  [[nodiscard]] std::string name() const override { return "mean_squared_error"; }
  double compute(const Tensor<float>& pred, const Tensor<float>& labels, Tensor<float>* d,
                 float scale) const override {
    if (labels.size() != pred.size())
      throw ShapeError(name() + ": labels of shape " + labels.shape().str() + " for predictions of shape " +
                       pred.shape().str());
    const std::size_t b = pred.shape()[0], w = detail::row_width(pred);
    detail::prepare_grad(pred, d);
    double total = 0;
    const float k = 2.f * scale / static_cast<float>(w);
    for (std::size_t i = 0; i < b; ++i) {
      double row = 0;
      for (std::size_t j = 0; j < w; ++j) {
        const float e = pred[i * w + j] - labels[i * w + j];
        row += static_cast<double>(e) * e;
        if (d) (*d)[i * w + j] = k * e;
      }
      total += row / static_cast<double>(w);
    }
    return total;
  }
};

}  // namespace strata::nn
