#pragma once
//! A Sequential model's side of the seam with the strategy's executor
//! (strategy/program.hpp): the layers, their parameter layout, the loss,
//! metrics and optimizer, and the program one replica runs: forward, loss
//! and backward on its rows of a batch, bound to its view of the
//! parameters. What runs where, and how gradients meet, is the executor's.
//!   strata::nn::detail::LayerProgram p;  p.add(std::make_unique<strata::nn::Dense>(10));
//!   strata::Tensor<float> init = p.build(strata::Shape{6});   // then an executor places it

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <strata/core/trace.hpp>
#include <strata/nn/layer.hpp>
#include <strata/nn/losses.hpp>
#include <strata/nn/metrics.hpp>
#include <strata/nn/optimizer.hpp>
#include <strata/nn/optimizer_updater.hpp>
#include <strata/nn/random.hpp>
#include <strata/strategy/program.hpp>

namespace strata::nn::detail {

//! "Dense" -> "dense", "MaxPool2D" -> "max_pool2d", "Conv2D" -> "conv2d" (Keras' style of layer names).
inline std::string lower_name(const std::string& kind) {
  std::string s;
  for (std::size_t i = 0; i < kind.size(); ++i) {
    const auto c = static_cast<unsigned char>(kind[i]);
    // a word starts at an upper-case letter that follows a lower-case one
    if (std::isupper(c) && i && std::islower(static_cast<unsigned char>(kind[i - 1]))) s += '_';
    s += static_cast<char>(std::tolower(c));
  }
  return s;
}

//! rows [r.begin, r.end) of host tensor `src` into `dst` in `c`'s space.
inline void copy_rows(Compute& c, const Tensor<float>& src, Range r, Act& dst) {
  const Shape s = sample_shape(src.shape());
  resize(c, dst, r.size(), s);
  const std::size_t w = s.elements();
  if (r.size()) c.upload(dst.data(), src.data() + r.begin * w, r.size() * w * sizeof(float));
}
//! The same on host tensors.
inline void copy_rows(const Tensor<float>& src, Range r, Tensor<float>& dst) {
  const Shape s = sample_shape(src.shape());
  resize(dst, r.size(), s);
  const std::size_t w = s.elements();
  if (r.size()) std::copy_n(src.data() + r.begin * w, r.size() * w, dst.data());
}

class LayerProgram;

//! One replica's layers, bound to its view of the parameters and its gradient buffer.
class LayerReplica final : public ReplicaProgram {
 public:
  LayerReplica(const LayerProgram& m, Compute& c, std::span<const float> value, std::span<float> grad);
  void step(const Batch& b, Range rows, const StepInfo& info, ReplicaResult& out) override;
  void load(const Batch& b, Range rows) override;
  void run_loaded(const StepInfo& info) override;
  void take_sums(std::size_t rows, ReplicaResult& out) override;
  void reset_sums() override { zero_sums(); }

 private:
  //! Forward through every layer from x_, then the loss and metric sums
  //! (into sums_, not zeroed here) and, training, the backward.
  const Act& forward(const StepInfo& info, std::size_t rows);
  void losses_and_backward(const Act& pred, const StepInfo& info, std::size_t rows);
  //! Every layer's backward, last first; each layer's parameter gradients,
  //! with their 1 / info.replicas share of the L2 gradient, told to
  //! info.ready once final.
  void backward(const StepInfo& info);
  void read_sums(ReplicaResult& out, bool counted);
  void zero_sums();

  const LayerProgram& m_;
  Compute& c_;
  std::span<const float> value_;
  std::span<float> grad_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Act> acts_;
  Act x_, y_, d_[2];
  kernels::Buffer<double> sums_;  // in c_'s space: loss, each metric, invalid labels, non-finite gradient values
  std::vector<double> host_sums_;
  std::vector<const char*> trace_names_;  // each layer's name, for its spans in the trace
  std::vector<std::size_t> layer_begin_;   // per layer, then the total: where its parameters start
};

class LayerProgram final : public ModelProgram {
 public:
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<Shape> shapes;                // per layer: its per-sample output shape
  Shape input_shape;                        // per-sample input (after build)
  std::vector<std::vector<ParamSpec>> specs;  // per layer: its parameters
  std::vector<std::string> names;           // per layer: "dense", "dense_1", ...
  std::size_t total = 0, first_trainable = 0;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Loss> loss;
  std::vector<std::unique_ptr<Metric>> metrics;
  std::uint64_t seed = 0;

  //! Infers every layer's shapes for per-sample `input` and returns the
  //! initial parameters (seeded). On a layer's refusal nothing changes.
  Tensor<float> build(const Shape& input) {
    Shape s = input;
    std::vector<Shape> out_shapes;
    std::vector<std::vector<ParamSpec>> out_specs;
    std::vector<std::string> out_names, kinds;
    std::size_t n = 0;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      try {
        s = layers[l]->build(s);
      } catch (const ShapeError& e) {
        throw ShapeError("Sequential: layer " + std::to_string(l) + " (" + layers[l]->kind() + "): " + e.what());
      }
      out_shapes.push_back(s);
      out_specs.push_back(layers[l]->params());
      const std::string base = lower_name(layers[l]->kind());
      const auto seen = static_cast<std::size_t>(std::count(kinds.begin(), kinds.end(), base));
      kinds.push_back(base);
      out_names.push_back(seen ? base + "_" + std::to_string(seen) : base);
      for (const auto& p : out_specs.back()) n += p.shape.elements();
    }
    input_shape = input;
    shapes = std::move(out_shapes);
    specs = std::move(out_specs);
    names = std::move(out_names);
    total = n;
    first_trainable = layers.size();
    for (std::size_t l = 0; l < layers.size() && first_trainable == layers.size(); ++l)
      if (!specs[l].empty()) first_trainable = l;
    Tensor<float> init{Shape{total}};
    std::size_t off = 0;
    for (std::size_t l = 0; l < layers.size(); ++l)
      for (std::size_t i = 0; i < specs[l].size(); ++i) {
        const ParamSpec& p = specs[l][i];
        const std::size_t k = p.shape.elements();
        if (p.init == Init::GlorotUniform) {
          const float limit = std::sqrt(6.f / static_cast<float>(std::max<std::size_t>(1, p.fan_in + p.fan_out)));
          Rng rng{mix(seed, l, i)};
          for (std::size_t j = 0; j < k; ++j) init[off + j] = (2.f * rng.uniform() - 1.f) * limit;
        }
        off += k;
      }
    return init;
  }

  //! f(offset, count, l2) for every parameter with an L2 regularizer.
  template <class F>
  void for_each_l2(F&& f) const {
    std::size_t off = 0;
    for (const auto& layer : specs)
      for (const auto& p : layer) {
        const std::size_t n = p.shape.elements();
        if (p.l2 > 0.f) f(off, n, p.l2);
        off += n;
      }
  }
  //! Whether any parameter has an L2 regularizer (the reported loss then reads the values).
  [[nodiscard]] bool regularized() const {
    bool any = false;
    for_each_l2([&](std::size_t, std::size_t, float) { any = true; });
    return any;
  }
  //! Sum of l2 * sum(w^2) over the regularized parameters of `v` (part of the reported loss, as in Keras).
  [[nodiscard]] double regularization_loss(const Tensor<float>& v) const {
    double sum = 0;
    for_each_l2([&](std::size_t off, std::size_t n, float l2) {
      double sq = 0;
      for (std::size_t i = off; i < off + n; ++i) sq += static_cast<double>(v[i]) * v[i];
      sum += l2 * sq;
    });
    return sum;
  }

  [[nodiscard]] std::size_t num_params() const override { return total; }
  [[nodiscard]] std::vector<Shape> variable_shapes() const override {
    std::vector<Shape> out;
    for (const auto& layer : specs)
      for (const auto& p : layer) out.push_back(p.shape);
    return out;
  }
  [[nodiscard]] std::size_t output_width() const override { return shapes.back().elements(); }
  [[nodiscard]] std::size_t num_metrics() const override { return metrics.size(); }
  [[nodiscard]] std::unique_ptr<ReplicaProgram> make_replica(std::span<const float> value,
                                                              std::span<float> grad) override {
    return make_replica_on(kernels::host_compute(), value, grad);
  }
  [[nodiscard]] std::unique_ptr<ReplicaProgram> make_replica_on(Compute& c, std::span<const float> value,
                                                                 std::span<float> grad) override {
    return std::make_unique<LayerReplica>(*this, c, value, grad);
  }
  //! The layout, the optimizer and its hyper-parameters, the seed.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> describe_for_fingerprint() const override {
    auto f = ModelProgram::describe_for_fingerprint();
    f.emplace_back("optimizer", optimizer ? optimizer->describe() : std::string("none (not compiled)"));
    f.emplace_back("seed", std::to_string(seed));
    return f;
  }
  //! Pipeline stages (nn/stage_program.hpp): every layer counts, with or without parameters.
  [[nodiscard]] std::size_t num_layers() const override { return layers.size(); }
  [[nodiscard]] std::vector<std::size_t> layer_param_counts() const override {
    std::vector<std::size_t> out;
    for (const auto& layer : specs) {
      std::size_t n = 0;
      for (const auto& p : layer) n += p.shape.elements();
      out.push_back(n);
    }
    return out;
  }
  [[nodiscard]] std::vector<std::size_t> layer_output_widths() const override {
    std::vector<std::size_t> out;
    for (const Shape& s : shapes) out.push_back(s.elements());
    return out;
  }
  [[nodiscard]] std::size_t input_width() const override { return input_shape.elements(); }
  [[nodiscard]] std::unique_ptr<StageProgram> make_stage(Range layers, std::span<const float> value,
                                                         std::span<float> grad) override;
  [[nodiscard]] std::unique_ptr<StageProgram> make_stage_on(Compute& c, Range layers, std::span<const float> value,
                                                            std::span<float> grad) override;
  [[nodiscard]] bool compiled() const override { return optimizer != nullptr; }
  [[nodiscard]] std::unique_ptr<Updater> make_updater(std::size_t n) const override {
    return make_updater_on(kernels::host_compute(), n);
  }
  [[nodiscard]] std::unique_ptr<Updater> make_updater_on(Compute& c, std::size_t n) const override {
    if (!optimizer) throw Error("Sequential: compile the model first (optimizer and loss)");
    return std::make_unique<OptimizerUpdater>(*optimizer, n, c);
  }
};

inline LayerReplica::LayerReplica(const LayerProgram& m, Compute& c, std::span<const float> value,
                                  std::span<float> grad)
    : m_(m), c_(c), value_(value), grad_(grad), acts_(m.layers.size()) {
  std::size_t off = 0;
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    layer_begin_.push_back(off);
    layers_.push_back(m.layers[l]->clone());
    trace_names_.push_back(trace::intern(m.names[l]));
    std::vector<ParamRef> refs;
    for (const auto& p : m.specs[l]) {
      const std::size_t n = p.shape.elements();
      refs.push_back({value.subspan(off, n), grad.subspan(off, n)});
      off += n;
    }
    layers_.back()->bind(refs);
  }
  layer_begin_.push_back(off);
  sums_.resize(c, Shape{m.metrics.size() + 3});
  host_sums_.resize(m.metrics.size() + 3);
}

inline void LayerReplica::step(const Batch& b, Range rows, const StepInfo& info, ReplicaResult& out) {
  out.rows = rows.size();
  load(b, rows);
  const Act& pred = forward(info, rows.size());
  if (info.phase == Phase::Predict) {
    const std::size_t w = pred.shape()[0] ? pred.size() / pred.shape()[0] : 0;
    if (pred.size()) c_.download(b.predictions + rows.begin * w, pred.data(), pred.size() * sizeof(float));
    return;
  }
  zero_sums();  // the sums start at zero in the replica's space; the ops add in place
  losses_and_backward(pred, info, rows.size());
  // On a device, the gradient's NaN and infinite values are counted with the
  // sums, for the executor's finiteness check without another read-back (a
  // host executor checks the reduced gradient itself).
  const bool count = info.phase == Phase::Train && c_.where() != kernels::Where::Host;
  if (count) c_.count_nonfinite(grad_.data(), grad_.size(), sums_.data() + m_.metrics.size() + 2);
  read_sums(out, count);
}

inline void LayerReplica::load(const Batch& b, Range rows) {
  copy_rows(c_, *b.x, rows, x_);
  if (b.y) copy_rows(c_, *b.y, rows, y_);
}

inline void LayerReplica::run_loaded(const StepInfo& info) {
  if (info.phase != Phase::Train || !info.counters)
    throw Error("LayerReplica::run_loaded: a captured step trains, with counters in the replica's memory");
  const std::size_t rows = x_.shape().rank() ? x_.shape()[0] : 0;
  losses_and_backward(forward(info, rows), info, rows);
  c_.count_nonfinite(grad_.data(), grad_.size(), &info.counters->bad);
}

inline void LayerReplica::take_sums(std::size_t rows, ReplicaResult& out) {
  out.rows = rows;
  try {
    read_sums(out, false);
  } catch (...) {
    zero_sums();  // the next read starts afresh
    throw;
  }
  zero_sums();
}

inline void LayerReplica::zero_sums() {
  const std::size_t nm = m_.metrics.size();
  if (c_.where() == kernels::Where::Host) {
    std::fill_n(sums_.data(), nm + 3, 0.0);
  } else {
    host_sums_.assign(nm + 3, 0.0);
    c_.upload(sums_.data(), host_sums_.data(), (nm + 3) * sizeof(double));
  }
}

inline const Act& LayerReplica::forward(const StepInfo& info, std::size_t rows) {
  const Act* in = &x_;
  RunInfo run{info.phase == Phase::Train, info.replica, m_.seed, info.iteration, 0, info.counters};
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    run.layer = l;
    trace::Span span{trace_names_[l], trace::Category::Forward, {{"layer", l}, {"rows", rows}}};
    layers_[l]->forward(c_, *in, acts_[l], run);
    in = &acts_[l];
  }
  return *in;
}

inline void LayerReplica::losses_and_backward(const Act& pred, const StepInfo& info, std::size_t rows) {
  double* sums = sums_.data();
  const std::size_t nm = m_.metrics.size();
  const bool train = info.phase == Phase::Train;
  {
    trace::Span span{"loss", trace::Category::Loss, {{"rows", rows}}};
    m_.loss->accumulate(c_, pred, y_, train ? &d_[0] : nullptr, info.scale, sums, sums + nm + 1);
    for (std::size_t k = 0; k < nm; ++k) m_.metrics[k]->accumulate(c_, pred, y_, sums + 1 + k, sums + nm + 1);
  }
  if (train) backward(info);
}

//! out gets the loss and metric sums and, when `counted`, the gradient's
//! non-finite count (DeviceExecutor's finiteness check reads it).
inline void LayerReplica::read_sums(ReplicaResult& out, bool counted) {
  const std::size_t nm = m_.metrics.size();
  const double* s = sums_.data();
  if (c_.where() != kernels::Where::Host) {
    c_.download(host_sums_.data(), sums_.data(), (nm + 3) * sizeof(double));
    s = host_sums_.data();
  }
  if (s[nm + 1] != 0)
    throw Error(m_.loss->name() + ": " + std::to_string(static_cast<long long>(s[nm + 1])) + " of " +
                std::to_string(out.rows) + " labels of the batch are not class indices in [0, " +
                std::to_string(m_.output_width()) + ") (counted on " + c_.name() + ")");
  out.loss = s[0];
  out.metrics.assign(s + 1, s + 1 + nm);
  out.nonfinite = counted ? std::optional<double>(s[nm + 2]) : std::nullopt;
}

inline void LayerReplica::backward(const StepInfo& info) {
  // L2: every replica adds its 1/p share of the gradient, so the sum adds it
  // once; each parameter's share right after its layer's backward (the same
  // calls as after the loop: the same bits), so the range told is final
  auto finish_layer = [&](std::size_t l) {
    const std::size_t begin = layer_begin_[l], end = layer_begin_[l + 1];
    if (begin == end) return;
    m_.for_each_l2([&](std::size_t off, std::size_t n, float l2) {
      if (off < begin || off >= end) return;
      const float k = 2.f * l2 / static_cast<float>(info.replicas);
      c_.axpy(k, value_.data() + off, grad_.data() + off, n);
    });
    if (info.ready) info.ready->ready(begin, end);
  };
  int cur = 0;
  for (std::size_t l = layers_.size(); l-- > 0;) {
    const Act& in = l ? acts_[l - 1] : x_;
    const bool need_dx = l > m_.first_trainable;
    {
      trace::Span span{trace_names_[l], trace::Category::Backward, {{"layer", l}}};
      layers_[l]->backward(c_, in, acts_[l], d_[cur], need_dx ? &d_[1 - cur] : nullptr);
    }
    finish_layer(l);
    if (!need_dx) break;
    cur = 1 - cur;
  }
}

}  // namespace strata::nn::detail

#include <strata/nn/stage_program.hpp>  // LayerProgram::make_stage
