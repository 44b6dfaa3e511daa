#pragma once
//! LayerReplica's definitions (declared in nn/program/model_program.hpp, which
//! includes this at its end): one replica's forward, loss and backward over
//! its layers, bound to its copy of the parameters and its gradient buffer,
//! or per call through StepInfo::windows (sharded: ZeRO 2 and 3).
//!   auto rep = program.make_replica(value, grad);  rep->step(batch, rows, info, out);

#include <strata/nn/program/model_program.hpp>

namespace strata::nn::detail {

inline LayerReplica::LayerReplica(const LayerProgram& m, Compute& c, std::span<const float> value,
                                  std::span<float> grad, const TensorSplit* split)
    : m_(m), c_(c), value_(value), grad_(grad), acts_(m.layers.size()), windowed_(grad.empty() && m.total > 0) {
  if (windowed_ && split) throw Error("tensor parallelism and ZeRO 2 or 3 do not combine (yet): choose one");
  std::size_t off = 0;
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    layer_begin_.push_back(off);
    layers_.push_back(m.layers[l]->clone());
    if (split) layers_.back()->split(split->roles.at(l), split->rank, split->size);  // its shard's shapes from here
    specs_.push_back(split ? layers_.back()->params() : m.specs[l]);
    trace_names_.push_back(trace::intern(m.names[l]));
    std::vector<ParamRef> refs;
    for (const auto& p : specs_.back()) {
      const std::size_t n = p.shape.elements();
      if (!windowed_) refs.push_back({value.subspan(off, n), grad.subspan(off, n)});
      off += n;
    }
    if (!windowed_) layers_.back()->bind(refs);
  }
  layer_begin_.push_back(off);
  if (split && (off != value.size() || off != grad.size()))
    throw Error("LayerReplica: its layers hold " + std::to_string(off) + " parameters, bound to " +
                std::to_string(value.size()) + " values and " + std::to_string(grad.size()) + " gradients");
  const std::size_t sums = detail::StepSums{m.metrics.size()}.size();
  sums_.resize(c, Shape{sums});
  host_sums_.resize(sums);
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
  if (count) c_.count_nonfinite(grad_.data(), grad_.size(), sums_.data() + detail::StepSums{m_.metrics.size()}.nonfinite());
  read_sums(out, count);
}

inline void LayerReplica::load(const Batch& b, Range rows) {
  copy_rows(c_, *b.x, rows, x_);
  if (b.y) copy_rows(c_, *b.y, rows, y_);
}

inline void LayerReplica::bind_layer(std::size_t l, const ParameterWindows::View& w) {
  std::vector<ParamRef> refs;
  std::size_t off = 0;
  for (const auto& p : specs_[l]) {
    const std::size_t n = p.shape.elements();
    refs.push_back({w.value.subspan(off, n), w.grad.empty() ? std::span<float>{} : w.grad.subspan(off, n)});
    off += n;
  }
  layers_[l]->bind(refs);
}

inline void LayerReplica::run_loaded(const StepInfo& info) {
  if (windowed_) throw Error("LayerReplica::run_loaded: a captured step cannot run with sharded parameters");
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
  const std::size_t n = detail::StepSums{m_.metrics.size()}.size();
  if (c_.where() == kernels::Where::Host) {
    std::fill_n(sums_.data(), n, 0.0);
  } else {
    host_sums_.assign(n, 0.0);
    c_.upload(sums_.data(), host_sums_.data(), n * sizeof(double));
  }
}

inline const Act& LayerReplica::forward(const StepInfo& info, std::size_t rows) {
  const Act* in = &x_;
  RunInfo run{info.phase == Phase::Train, info.replica, m_.seed, info.iteration, 0, info.counters, info.tensor_group};
  if (windowed_ && !info.windows)
    throw Error("LayerReplica: made without a gradient buffer (sharded: ZeRO 2 or 3), its steps need StepInfo::windows");
  if (!m_.chain) {  // a functional model: each node from the outputs it takes
    NodeRun<LayerProgram>(m_, c_, {0, layers_.size()})
        .forward(layers_, x_, acts_, run, [&](std::size_t l, auto&& call) {
          const std::size_t begin = layer_begin_[l], end = layer_begin_[l + 1];
          const bool window = windowed_ && begin < end;
          if (window) bind_layer(l, info.windows->acquire(begin, end, false));
          {
            trace::Span span{trace_names_[l], trace::Category::Forward, {{"layer", l}, {"rows", rows}}};
            call();
          }
          if (window) info.windows->release(begin, end, false);
        });
    return acts_.back();
  }
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    run.layer = l;
    const std::size_t begin = layer_begin_[l], end = layer_begin_[l + 1];
    const bool window = windowed_ && begin < end;
    if (window) bind_layer(l, info.windows->acquire(begin, end, false));
    {
      trace::Span span{trace_names_[l], trace::Category::Forward, {{"layer", l}, {"rows", rows}}};
      layers_[l]->forward(c_, *in, acts_[l], run);
    }
    if (window) info.windows->release(begin, end, false);
    in = &acts_[l];
  }
  return *in;
}

inline void LayerReplica::losses_and_backward(const Act& pred, const StepInfo& info, std::size_t rows) {
  const bool train = info.phase == Phase::Train;
  {
    trace::Span span{"loss", trace::Category::Loss, {{"rows", rows}}};
    detail::StepSums{m_.metrics.size()}.accumulate(c_, *m_.loss, m_.metrics, pred, y_, train ? &d_[0] : nullptr,
                                                   info.scale, sums_.data());
  }
  if (train) backward(info);
}

//! out gets the loss and metric sums and, when `counted`, the gradient's
//! non-finite count (DeviceExecutor's finiteness check reads it).
inline void LayerReplica::read_sums(ReplicaResult& out, bool counted) {
  const detail::StepSums at{m_.metrics.size()};
  const double* s = sums_.data();
  if (c_.where() != kernels::Where::Host) {
    c_.download(host_sums_.data(), sums_.data(), at.size() * sizeof(double));
    s = host_sums_.data();
  }
  if (const auto [bad, who] = at.invalid(s, *m_.loss, m_.metrics); bad != 0)
    throw Error(who + ": " + std::to_string(static_cast<long long>(bad)) + " of " + std::to_string(out.rows) +
                " labels of the batch are not class indices in [0, " + std::to_string(m_.output_width()) +
                ") (counted on " + c_.name() + ")");
  out.loss = s[0];
  out.metrics.assign(s + 1, s + 1 + at.metrics);
  out.nonfinite = counted ? std::optional<double>(s[at.nonfinite()]) : std::nullopt;
}

inline void LayerReplica::backward(const StepInfo& info) {
  // L2: every replica adds its 1/p share of the gradient, so the sum adds it
  // once; each parameter's share right after its layer's backward (the same
  // calls as after the loop: the same bits), so the range told is final
  // (windowed: in the layer's windows, and the window released instead)
  ParameterWindows::View w{value_, grad_};
  auto finish_layer = [&](std::size_t l) {
    const std::size_t begin = layer_begin_[l], end = layer_begin_[l + 1];
    if (begin == end) return;
    const std::size_t base = windowed_ ? begin : 0;  // where w starts in the flat layout
    std::size_t off = begin;  // this replica's layout (a split layer's: its shard's)
    for (const ParamSpec& p : specs_[l]) {
      const std::size_t n = p.shape.elements();
      if (p.l2 > 0.f)
        c_.axpy(2.f * p.l2 / static_cast<float>(info.replicas), w.value.data() + (off - base),
                w.grad.data() + (off - base), n);
      off += n;
    }
    if (windowed_) info.windows->release(begin, end, true);
    else if (info.ready) info.ready->ready(begin, end);
  };
  if (!m_.chain) {  // a functional model: each output's gradient summed over its consumers
    NodeRun<LayerProgram>(m_, c_, {0, layers_.size()})
        .backward(layers_, x_, acts_, d_[0], graph_, nullptr, [&](std::size_t l, auto&& call) {
          if (windowed_ && layer_begin_[l] < layer_begin_[l + 1]) {
            w = info.windows->acquire(layer_begin_[l], layer_begin_[l + 1], true);
            bind_layer(l, w);
          }
          {
            trace::Span span{trace_names_[l], trace::Category::Backward, {{"layer", l}}};
            call();
          }
          finish_layer(l);
        });
    return;
  }
  int cur = 0;
  for (std::size_t l = layers_.size(); l-- > 0;) {
    const Act& in = l ? acts_[l - 1] : x_;
    const bool need_dx = l > m_.first_trainable;
    if (windowed_ && layer_begin_[l] < layer_begin_[l + 1]) {
      w = info.windows->acquire(layer_begin_[l], layer_begin_[l + 1], true);
      bind_layer(l, w);
    }
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
