#pragma once
//! LayerStage: a Sequential model's pipeline stage (execution/program.hpp's
//! StageProgram): a contiguous range of its layers, bound to their slice of
//! the parameters and of the gradient, run on a compute (the host's or a
//! GPU's) one micro-batch at a time, with LayerReplica's operations in the
//! same order (nn/program/model_program.hpp), so one micro-batch through all
//! stages gives LayerReplica's bits. Each kept micro-batch has its own layer
//! clones. With tensor parallelism (a TensorSplit and its group) the stage
//! is one member's: its layers split as the plan says, partial results
//! summed over the group, input and output activations whole on every
//! member. docs/model-parallelism.md.
//!   auto stage = program.make_stage({0, 3}, value.subspan(0, n), grad.subspan(0, n));

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <strata/nn/program/model_program.hpp>

namespace strata::nn::detail {

class LayerStage final : public StageProgram {
 public:
  //! `split`: a tensor-parallel member's stage (`value` and `grad` its
  //! shard's), its split layers summing over `group`.
  LayerStage(const LayerProgram& m, Compute& c, Range layers, std::span<const float> value, std::span<float> grad,
             const TensorSplit* split = nullptr, TensorGroup* group = nullptr)
      : m_(m), c_(c), r_(layers), value_(value), grad_(grad), mg_(c, Shape{grad.size()}), group_(group) {
    if (split) split_ = *split;
    std::size_t n = 0;
    for (std::size_t l = r_.begin; l < r_.end; ++l) {
      if (split_) specs_.push_back(clone_layer(l)->params());  // its shard's
      else specs_.push_back(m.specs[l]);
      layer_at_.push_back(n);
      for (const auto& p : specs_.back()) n += p.shape.elements();
    }
    layer_at_.push_back(n);
    if (n != value.size() || n != grad.size())
      throw Error(m.kind + ": a pipeline stage of layers " + std::to_string(r_.begin) + " to " +
                  std::to_string(r_.end - 1) + " holds " + std::to_string(n) + " parameters, bound to " +
                  std::to_string(value.size()) + " values and " + std::to_string(grad.size()) +
                  " gradients (an internal error)");
    const std::size_t sums = detail::StepSums{m.metrics.size()}.size();
    sums_.resize(c_, Shape{sums});
    host_sums_.resize(sums);
  }

  [[nodiscard]] std::size_t input_width() const override { return in_shape().elements(); }
  [[nodiscard]] std::size_t output_width() const override { return m_.shapes[r_.end - 1].elements(); }
  [[nodiscard]] bool has_backward() const override { return r_.end > m_.first_trainable; }
  [[nodiscard]] bool has_input_gradient() const override { return r_.begin > m_.first_trainable; }

  void set_slots(std::size_t n) override {
    if (slots_.size() == n) return;
    slots_.clear();
    slots_.resize(n);
    for (Slot& s : slots_) {
      s.acts.resize(r_.size());
      std::size_t off = 0;
      for (std::size_t l = r_.begin; l < r_.end; ++l) {
        s.layers.push_back(clone_layer(l));
        std::vector<ParamRef> refs;
        for (const auto& p : specs_[l - r_.begin]) {
          const std::size_t k = p.shape.elements();
          refs.push_back({value_.subspan(off, k), std::span<float>(mg_.data(), mg_.size()).subspan(off, k)});
          off += k;
        }
        s.layers.back()->bind(refs);
      }
    }
  }

  std::span<const float> forward(std::size_t slot, const float* in, std::size_t rows, const StageStep& st) override {
    Slot& s = slots_.at(slot);
    resize(c_, s.x, rows, in_shape());
    if (rows) c_.upload(s.x.data(), in, s.x.size() * sizeof(float));
    s.d.resize(c_, Shape{0});
    const Act* x = &s.x;
    RunInfo run{st.phase == Phase::Train, st.micro, m_.seed, st.iteration, 0, nullptr, group_};
    if (!m_.chain) {  // a functional model: each node from the outputs it takes
      NodeRun<LayerProgram>(m_, c_, r_).forward(s.layers, s.x, s.acts, run, [](std::size_t, auto&& call) { call(); });
      return {s.acts.back().data(), s.acts.back().size()};
    }
    for (std::size_t i = 0; i < r_.size(); ++i) {
      run.layer = r_.begin + i;
      s.layers[i]->forward(c_, *x, s.acts[i], run);
      x = &s.acts[i];
    }
    return {x->data(), x->size()};
  }

  void loss(std::size_t slot, const Tensor<float>& y, Range rows, const StageStep& st, ReplicaResult& out) override {
    Slot& s = slots_.at(slot);
    out.rows = rows.size();
    copy_rows(c_, y, rows, y_);
    const detail::StepSums at{m_.metrics.size()};
    double* sums = sums_.data();
    host_sums_.assign(at.size(), 0.0);  // the sums start at zero in the stage's space
    c_.upload(sums, host_sums_.data(), at.size() * sizeof(double));
    const Act& pred = s.acts.back();
    const bool train = st.phase == Phase::Train;
    at.accumulate(c_, *m_.loss, m_.metrics, pred, y_, train ? &s.d : nullptr, st.scale, sums);
    c_.download(host_sums_.data(), sums, at.size() * sizeof(double));
    sums = host_sums_.data();
    if (const auto [bad, who] = at.invalid(sums, *m_.loss, m_.metrics); bad != 0)
      throw Error(who + ": " + std::to_string(static_cast<long long>(bad)) + " of " + std::to_string(out.rows) +
                  " labels of the batch are not class indices in [0, " + std::to_string(m_.output_width()) +
                  ") (counted on pipeline stage of layers " + std::to_string(r_.begin) + ".." +
                  std::to_string(r_.end - 1) + " on " + c_.name() + ")");
    out.loss = sums[0];
    out.metrics.assign(sums + 1, sums + 1 + at.metrics);
    out.nonfinite.reset();
  }

  std::span<const float> backward(std::size_t slot, const float* dout, bool first,
                                  const LastBackward* last) override {
    Slot& s = slots_.at(slot);
    if (!has_backward()) return {};
    std::size_t done = r_.size();  // with `last`: layers [done, end) here are finished and told
    const Act* dy = &s.d;  // the last stage: the loss's gradient, kept by loss()
    if (dout) {
      const Act& y = s.acts.back();
      d_[0].resize(c_, y.shape());
      if (y.size()) c_.upload(d_[0].data(), dout, y.size() * sizeof(float));
      dy = &d_[0];
    }
    Act* dx = nullptr;
    if (!m_.chain) {  // a functional model: the stage input's gradient summed over the nodes that take it
      if (NodeRun<LayerProgram>(m_, c_, r_).backward(s.layers, s.x, s.acts, *dy, graph_,
                                                     has_input_gradient() ? &d_[1] : nullptr,
                                                     [](std::size_t, auto&& call) { call(); }))
        dx = &d_[1];
    }
    int cur = 0;
    for (std::size_t i = m_.chain ? r_.size() : 0; i-- > 0;) {
      const std::size_t l = r_.begin + i;
      const Act& in = i ? s.acts[i - 1] : s.x;
      const bool need_dx = l > m_.first_trainable;
      Act* next = need_dx ? &d_[cur == 0 ? 1 : 0] : nullptr;
      s.layers[i]->backward(c_, in, s.acts[i], *dy, next);
      if (last) {  // its gradient final: told at once
        finish_layers(i, done, first, *last);
        done = i;
      }
      if (!need_dx) break;
      dx = next;
      dy = next;
      cur = 1 - cur;
    }
    if (last) finish_layers(0, done, first, *last);  // the rest (a functional model's: all of it)
    else add_micro_gradient(0, mg_.size(), first);
    if (!has_input_gradient() || !dx) return {};
    return {dx->data(), dx->size()};
  }

  void finish_gradient(int copies) override { add_l2(0, specs_.size(), copies); }

  [[nodiscard]] std::size_t activation_bytes(std::size_t slot) const override {
    const Slot& s = slots_.at(slot);
    std::size_t n = s.x.size() + s.d.size();
    for (const Act& a : s.acts) n += a.size();
    return n * sizeof(float);
  }

 private:
  struct Slot {
    std::vector<std::unique_ptr<Layer>> layers;
    Act x, d;  // the input; on the last stage, the loss's gradient
    std::vector<Act> acts;
  };
  [[nodiscard]] const Shape& in_shape() const { return r_.begin ? m_.shapes[r_.begin - 1] : m_.input_shape; }
  //! Elements [b, e) of the micro-batch's parameter gradients into the
  //! batch's: written (`first`) or added (elementwise: any cut gives the same bits).
  void add_micro_gradient(std::size_t b, std::size_t e, bool first) {
    if (b == e) return;
    if (first) c_.copy(grad_.data() + b, mg_.data() + b, (e - b) * sizeof(float));
    else c_.axpy(1.f, mg_.data() + b, grad_.data() + b, e - b);
  }
  //! L2 on the parameters of layers [lo, hi) here (a member's: its
  //! shard's): this copy's 1/copies share (as a replica's), parameter by parameter.
  void add_l2(std::size_t lo, std::size_t hi, int copies) {
    for (std::size_t i = lo, off = layer_at_[lo]; i < hi; ++i)
      for (const ParamSpec& p : specs_[i]) {
        const std::size_t n = p.shape.elements();
        if (p.l2 > 0.f) c_.axpy(2.f * p.l2 / static_cast<float>(copies), value_.data() + off, grad_.data() + off, n);
        off += n;
      }
  }
  //! Layers [lo, hi) here have run their last backward of the batch: their
  //! gradients summed with the earlier micro-batches', their L2 share added,
  //! and told final.
  void finish_layers(std::size_t lo, std::size_t hi, bool first, const LastBackward& last) {
    if (lo >= hi) return;
    add_micro_gradient(layer_at_[lo], layer_at_[hi], first);
    add_l2(lo, hi, last.copies);
    if (last.ready) last.ready->ready(layer_at_[lo], layer_at_[hi]);
  }
  //! Layer l as this stage runs it (a member's: split as the plan says).
  [[nodiscard]] std::unique_ptr<Layer> clone_layer(std::size_t l) const {
    auto layer = m_.layers[l]->clone();
    if (split_) layer->split(split_->roles.at(l), split_->rank, split_->size);
    return layer;
  }

  const LayerProgram& m_;
  Compute& c_;
  Range r_;
  std::span<const float> value_;
  std::span<float> grad_;
  kernels::Buffer<float> mg_;  // one micro-batch's parameter gradients (the layers overwrite theirs)
  std::optional<TensorSplit> split_;               // a tensor-parallel member's stage
  TensorGroup* group_ = nullptr;                   // its group
  std::vector<std::vector<ParamSpec>> specs_;      // per layer here: its parameters (a split layer's shard's)
  std::vector<std::size_t> layer_at_;              // per layer here, and the end: where its parameters start
  std::vector<Slot> slots_;
  Act y_, d_[2];
  NodeGrads graph_;  // a functional model's backward (nn/program/graph_run.hpp)
  kernels::Buffer<double> sums_;  // in c_'s space: detail::StepSums (loss, each metric, bad-label counts)
  std::vector<double> host_sums_;
};

inline std::unique_ptr<StageProgram> LayerProgram::make_stage(Range layers, std::span<const float> value,
                                                              std::span<float> grad) {
  return make_stage_on(kernels::host_compute(), layers, value, grad);
}

//! A stage of layers `r` of `m`: a range of its layers where a stage may start.
inline void check_stage_range(const LayerProgram& m, Range r) {
  if (r.begin >= r.end || r.end > m.layers.size())
    throw Error(m.kind + ": a pipeline stage of layers [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                ") of a model of " + std::to_string(m.layers.size()) + " layers");
  if (!m.cut_before(r.begin))
    throw Error(m.kind + ": a pipeline stage cannot start at layer " + std::to_string(r.begin) +
                ": a later layer takes an output from before layer " + std::to_string(r.begin - 1));
}

inline std::unique_ptr<StageProgram> LayerProgram::make_stage_on(Compute& c, Range layers,
                                                                 std::span<const float> value, std::span<float> grad) {
  check_stage_range(*this, layers);
  return std::make_unique<LayerStage>(*this, c, layers, value, grad);
}

inline std::unique_ptr<StageProgram> LayerProgram::make_tensor_stage_on(Compute* c, std::span<const Range> stages,
                                                                        std::size_t s, int rank, int size,
                                                                        TensorGroup& group,
                                                                        std::span<const float> value,
                                                                        std::span<float> grad) {
  if (s >= stages.size())
    throw Error(kind + ": pipeline stage " + std::to_string(s) + " of " + std::to_string(stages.size()));
  if (rank < 0 || rank >= size)
    throw Error(kind + ": tensor-parallel rank " + std::to_string(rank) + " outside a group of " + std::to_string(size));
  check_stage_range(*this, stages[s]);
  const TensorSplit split{rank, size, tensor_plan(size, stages)};
  return std::make_unique<LayerStage>(*this, c ? *c : kernels::host_compute(), stages[s], value, grad, &split, &group);
}

}  // namespace strata::nn::detail
