#pragma once
//! A Sequential model's side of the seam with the strategy's executor
//! (execution/program.hpp): the layers, their parameter layout, the loss,
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
#include <strata/nn/program/data_pass.hpp>
#include <strata/nn/layers/attention.hpp>
#include <strata/nn/layers/dense.hpp>
#include <strata/nn/program/graph_run.hpp>
#include <strata/nn/layers/layer.hpp>
#include <strata/nn/program/losses.hpp>
#include <strata/nn/layers/merge.hpp>
#include <strata/nn/program/metrics.hpp>
#include <strata/nn/program/node.hpp>
#include <strata/nn/optimizers/optimizer.hpp>
#include <strata/nn/optimizers/optimizer_updater.hpp>
#include <strata/nn/layers/random.hpp>
#include <strata/execution/program.hpp>

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

//! `pass` predicts the rows of host tensor `x`, `batch_size` at a time
//! (`scratch` holds the current batch: copy_rows), each batch's outputs
//! (`width` per row) into `out` at its rows. `x`, `out` and `scratch` outlive the pass.
inline void predict_rows(FnPass& pass, const Tensor<float>& x, std::size_t batch_size, float* out, std::size_t width,
                         Tensor<float>& scratch, std::int64_t* iteration) {
  pass.phase = Phase::Predict;
  pass.iteration = iteration;
  pass.next_fn = [&x, &scratch, batch_size, out, width, b = std::size_t{0}]() mutable -> std::optional<Batch> {
    const std::size_t n = x.shape()[0];
    if (b >= n) return std::nullopt;
    copy_rows(x, {b, std::min(n, b + batch_size)}, scratch);
    Batch next{&scratch, nullptr, out + b * width};
    b += batch_size;
    return next;
  };
}

class LayerProgram;

//! A replica's part in tensor parallelism: member `rank` of `size`, each
//! layer in its role (LayerProgram::tensor_plan).
struct TensorSplit {
  int rank = 0, size = 1;
  std::vector<TensorRole> roles;
};

//! One replica's layers, bound to its view of the parameters and its gradient buffer.
class LayerReplica final : public ReplicaProgram {
 public:
  //! `split`: tensor parallelism's member (its layers split as it says, `value` and `grad` its shard's).
  LayerReplica(const LayerProgram& m, Compute& c, std::span<const float> value, std::span<float> grad,
               const TensorSplit* split = nullptr);
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
  //! Layer l's parameters as `w` (through StepInfo::windows) tells: it is bound to them.
  void bind_layer(std::size_t l, const ParameterWindows::View& w);

  const LayerProgram& m_;
  Compute& c_;
  std::span<const float> value_;
  std::span<float> grad_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Act> acts_;
  Act x_, y_, d_[2];
  kernels::Buffer<double> sums_;  // in c_'s space: detail::StepSums (loss, each metric, bad-label counts, non-finite values)
  std::vector<double> host_sums_;
  std::vector<const char*> trace_names_;  // each layer's name, for its spans in the trace
  std::vector<std::size_t> layer_begin_;   // per layer, then the total: where its parameters start
  std::vector<std::vector<ParamSpec>> specs_;  // per layer: its parameters here (a split layer's shard's)
  bool windowed_ = false;  // made with no gradient buffer: layers bound per call (ZeRO 2 and 3)
  NodeGrads graph_;        // a functional model's backward (nn/program/graph_run.hpp); unused for a chain
};

class LayerProgram final : public ModelProgram {
 public:
  std::vector<std::unique_ptr<Layer>> layers;
  //! Per layer: the layers whose outputs it takes, in order (graph_input:
  //! the model's input). Left empty, build() makes a chain (Sequential).
  std::vector<std::vector<std::size_t>> inputs;
  std::string kind = "Sequential";          // for messages: "Sequential" or "Model"
  bool chain = true;                        // each layer takes the one before it (after build)
  std::vector<char> grad_needed;            // per layer: a parameter at or before it (its output's gradient is used)
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
    if (inputs.size() != layers.size()) {  // a Sequential's (layers added since): a chain
      inputs.clear();
      for (std::size_t l = 0; l < layers.size(); ++l) inputs.push_back({l ? l - 1 : graph_input});
    }
    std::vector<Shape> out_shapes;
    std::vector<std::vector<ParamSpec>> out_specs;
    std::vector<std::string> out_names, kinds;
    std::size_t n = 0;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      std::vector<Shape> in;
      for (std::size_t p : inputs[l]) in.push_back(p == graph_input ? input : out_shapes.at(p));
      Shape s;
      try {
        if (auto* merge = dynamic_cast<Merge*>(layers[l].get()); merge && in.size() > 1) s = merge->build(in);
        else s = layers[l]->build(in.at(0));  // a merge in a Sequential refuses here
      } catch (const ShapeError& e) {
        throw ShapeError(kind + ": layer " + std::to_string(l) + " (" + layers[l]->kind() + "): " + e.what());
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
    chain = true;
    grad_needed.assign(layers.size(), 0);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      chain = chain && inputs[l].size() == 1 && inputs[l][0] == (l ? l - 1 : graph_input);
      grad_needed[l] = !specs[l].empty();
      for (std::size_t p : inputs[l]) grad_needed[l] = grad_needed[l] || (p != graph_input && grad_needed[p]);
    }
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

  //! Whether a pipeline stage may start at layer k (0 < k < layers): no layer
  //! from k on takes an output from before k - 1 (one activation crosses the cut).
  [[nodiscard]] bool cut_before(std::size_t k) const override {
    if (chain || k == 0) return true;
    for (std::size_t l = k; l < layers.size(); ++l)
      for (std::size_t p : inputs[l])
        if (p == graph_input || p + 1 < k) return false;
    return true;
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
  //! Tensor parallelism over a group of `size`: each layer's role. Every
  //! MultiHeadAttention splits its heads (an Error, naming the layer, when
  //! they do not divide by `size`); a Dense whose output only a Dense takes
  //! splits with it as Megatron's MLP pair (Column, then Row) when `size`
  //! divides its units; every other layer is replicated. With pipeline
  //! `stages` (layer ranges), a pair whose two layers fall in different
  //! stages stays whole: the column half's output would cross the boundary split.
  [[nodiscard]] std::vector<TensorRole> tensor_plan(int size, std::span<const Range> stages = {}) const {
    if (size < 1) throw Error(kind + ": a tensor-parallel group needs at least one replica, got " + std::to_string(size));
    std::vector<TensorRole> roles(layers.size(), TensorRole::Replicated);
    if (size == 1) return roles;
    std::vector<std::vector<std::size_t>> consumers(layers.size());
    for (std::size_t l = 0; l < layers.size(); ++l)
      for (std::size_t p : inputs.at(l))
        if (p != graph_input) consumers[p].push_back(l);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      if (const auto* a = dynamic_cast<const MultiHeadAttention*>(layers[l].get())) {
        if (!a->can_split(TensorRole::Heads, size))
          throw Error(kind + ": layer '" + names[l] + "' (MultiHeadAttention) has " + std::to_string(a->heads()) +
                      (a->heads() == 1 ? " head" : " heads") + (static_cast<std::size_t>(size) > a->heads()
                          ? ", fewer than the " + std::to_string(size) + " tensor-parallel replicas: each replica takes "
                                                                          "whole heads; use at most that many"
                          : ": they cannot be split evenly over " + std::to_string(size) +
                                " tensor-parallel replicas; choose a tensor-parallel size that divides the heads"));
        roles[l] = TensorRole::Heads;
        continue;
      }
      if (roles[l] != TensorRole::Replicated || consumers[l].size() != 1) continue;
      const std::size_t k = consumers[l][0];
      if (inputs[k].size() != 1 || roles[k] != TensorRole::Replicated) continue;
      if (!dynamic_cast<const Dense*>(layers[l].get()) || !dynamic_cast<const Dense*>(layers[k].get())) continue;
      const auto apart = [&](Range r) { return (l >= r.begin && l < r.end) != (k >= r.begin && k < r.end); };
      if (std::any_of(stages.begin(), stages.end(), apart)) continue;  // a stage boundary between them
      if (layers[l]->can_split(TensorRole::Column, size) && layers[k]->can_split(TensorRole::Row, size))
        roles[l] = TensorRole::Column, roles[k] = TensorRole::Row;
    }
    return roles;
  }
  [[nodiscard]] std::vector<TensorSegment> tensor_layout(int rank, int size,
                                                         std::span<const Range> stages = {}) const override {
    if (rank < 0 || rank >= size)
      throw Error(kind + ": tensor-parallel rank " + std::to_string(rank) + " outside a group of " + std::to_string(size));
    const auto roles = tensor_plan(size, stages);
    std::vector<TensorSegment> out;
    std::size_t off = 0;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      auto clone = layers[l]->clone();
      for (TensorSegment s : clone->split(roles[l], rank, size)) {
        s.offset += off;
        out.push_back(s);
      }
      for (const auto& p : specs[l]) off += p.shape.elements();
    }
    return out;
  }
  [[nodiscard]] std::string describe_tensor_split(int size, std::span<const Range> stages = {}) const override {
    const auto roles = tensor_plan(size, stages);
    std::size_t heads = 0, pairs = 0;
    for (TensorRole r : roles) heads += r == TensorRole::Heads, pairs += r == TensorRole::Column;
    std::string out = "tensor parallel over " + std::to_string(size) + " replicas: ";
    if (heads + pairs == 0) return out + "no layer splits (every replica runs the whole model)";
    if (heads) out += std::to_string(heads) + " attention layer" + (heads == 1 ? "" : "s") + " split by heads";
    if (heads && pairs) out += ", ";
    if (pairs) out += std::to_string(pairs) + " Dense pair" + (pairs == 1 ? "" : "s") + " split column then row";
    return out + "; the rest replicated";
  }
  [[nodiscard]] std::unique_ptr<ReplicaProgram> make_tensor_replica_on(Compute* c, int rank, int size,
                                                                        std::span<const float> value,
                                                                        std::span<float> grad) override {
    const TensorSplit split{rank, size, tensor_plan(size)};
    return std::make_unique<LayerReplica>(*this, c ? *c : kernels::host_compute(), value, grad, &split);
  }
  [[nodiscard]] std::unique_ptr<StageProgram> make_tensor_stage_on(Compute* c, std::span<const Range> stages,
                                                                   std::size_t s, int rank, int size,
                                                                   TensorGroup& group, std::span<const float> value,
                                                                   std::span<float> grad) override;

  //! Pipeline stages (nn/program/stage_program.hpp): every layer counts, with or without parameters.
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
    if (!optimizer) throw Error(kind + ": compile the model first (optimizer and loss)");
    return std::make_unique<OptimizerUpdater>(*optimizer, n, c);
  }
};

}  // namespace strata::nn::detail

#include <strata/nn/program/layer_replica.hpp>  // LayerReplica's definitions
#include <strata/nn/program/stage_program.hpp>  // LayerProgram::make_stage
