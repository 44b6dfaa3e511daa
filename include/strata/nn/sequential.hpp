#pragma once
//! Sequential: a stack of layers trained with the strategy in whose scope it
//! was made (the default strategy otherwise), Keras-style.
//!   auto model = strategy.scope([] {
//!     return strata::nn::Sequential{strata::nn::Input{{28, 28}}, strata::nn::Flatten{}, strata::nn::Dense{10}};
//!   });
//!   model.compile(strata::nn::Adam{1e-3}, strata::nn::SparseCategoricalCrossentropy{{.from_logits = true}},
//!                 {strata::nn::Accuracy{}});
//!   model.fit(strategy.distribute(train), {.epochs = 5});
//! The model code does not change with the strategy. Under a strategy with p
//! replicas each global batch is split into p contiguous row ranges; every
//! replica computes the gradient of (sum of its examples' losses) / (global
//! batch size), and the gradients are summed: p replicas take the same step
//! as one replica on the whole batch. Same seed, strategy and replica count
//! give bitwise-identical weights (all reductions run in a fixed order).
//! The strategy must outlive the model.

#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <strata/core/partition.hpp>
#include <strata/nn/callbacks.hpp>
#include <strata/nn/layer.hpp>
#include <strata/nn/logs.hpp>
#include <strata/nn/losses.hpp>
#include <strata/nn/metrics.hpp>
#include <strata/nn/optimizer.hpp>
#include <strata/nn/progress.hpp>
#include <strata/nn/weights_file.hpp>
#include <strata/strategy/strategy.hpp>

namespace strata::nn {

//! The per-sample input shape, as the first element of a Sequential.
struct Input {
  Shape shape;
};

//! Metrics for compile: `{strata::nn::Accuracy{}, ...}`.
class MetricList {
 public:
  MetricList() = default;
  template <std::derived_from<Metric>... M>
  MetricList(M... m) {  // NOLINT: implicit, for brace lists
    (items_.push_back(std::make_unique<M>(std::move(m))), ...);
  }
  MetricList(MetricList&&) = default;
  MetricList& operator=(MetricList&&) = default;
  std::vector<std::unique_ptr<Metric>>& items() noexcept { return items_; }

 private:
  std::vector<std::unique_ptr<Metric>> items_;
};

struct CompileOptions {
  std::uint64_t seed = 0;  //!< keys weight initialization and dropout; fixed by default, so runs repeat
};

struct FitOptions {
  int epochs = 1;
  Verbosity verbose = Verbosity::Auto;
  std::vector<Callback*> callbacks = {};
  std::size_t steps_per_epoch = 0;  //!< 0: until the dataset ends
  std::FILE* out = stdout;          //!< where progress goes
};

struct EvaluateOptions {
  Verbosity verbose = Verbosity::Silent;
  std::FILE* out = stdout;
};

namespace detail {

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

//! rows [r.begin, r.end) of `src` into `dst`.
inline void copy_rows(const Tensor<float>& src, Range r, Tensor<float>& dst) {
  const Shape s = sample_shape(src.shape());
  resize(dst, r.size(), s);
  const std::size_t w = s.elements();
  if (r.size()) std::copy_n(src.data() + r.begin * w, r.size() * w, dst.data());
}

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

inline std::string with_commas(std::size_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}
}  // namespace detail

class Sequential {
 public:
  //! Layers in order; an Input{shape} first fixes the per-sample input shape
  //! (otherwise the first batch does).
  template <class... L>
    requires((std::derived_from<std::remove_cvref_t<L>, Layer> || std::same_as<std::remove_cvref_t<L>, Input>) && ...)
  explicit Sequential(L&&... layers) : strategy_(&current_strategy()) {
    (add(std::forward<L>(layers)), ...);
  }
  Sequential(Sequential&&) = default;
  Sequential& operator=(Sequential&&) = default;

  //! Appends a layer (before build).
  template <class L>
    requires std::derived_from<std::remove_cvref_t<L>, Layer>
  void add(L&& layer) {
    if (built()) throw Error("Sequential::add: the model is already built; add layers before fit/build");
    layers_.push_back(std::make_unique<std::remove_cvref_t<L>>(std::forward<L>(layer)));
  }
  void add(Input in) {
    if (!layers_.empty() || input_) throw Error("Sequential: Input must come first, and once");
    input_ = std::move(in.shape);
  }

  [[nodiscard]] bool built() const noexcept { return params_.has_value(); }
  [[nodiscard]] AnyStrategy& strategy() const noexcept { return *strategy_; }
  [[nodiscard]] std::size_t count_params() const noexcept { return total_; }
  [[nodiscard]] std::int64_t iterations() const noexcept { return iterations_; }
  [[nodiscard]] const std::vector<std::unique_ptr<Layer>>& layers() const noexcept { return layers_; }

  //! Sets the loss, optimizer and metrics. Call before fit/evaluate.
  template <std::derived_from<Optimizer> O, std::derived_from<Loss> L>
  void compile(O optimizer, L loss, MetricList metrics = {}, CompileOptions opts = {}) {
    optimizer_ = std::make_unique<O>(std::move(optimizer));
    loss_ = std::make_unique<L>(std::move(loss));
    metrics_ = std::move(metrics.items());
    for (auto& m : metrics_) m->set_loss(*loss_);
    seed_ = opts.seed;  // a model built before compile keeps the weights it was built with
    iterations_ = 0;    // a new optimizer starts at step 0 (bias correction, schedules)
    make_states();
  }

  //! Builds for a per-sample input shape: infers every layer's shapes,
  //! initializes the parameters (seeded) and places them as the strategy says.
  void build(const Shape& input) {
    if (built()) {
      if (input != *input_) throw ShapeError("Sequential: built for per-sample input " + input_->str() + ", got " + input.str());
      return;
    }
    if (input_ && *input_ != input)
      throw ShapeError("Sequential: declared Input " + input_->str() + " but the data has per-sample shape " + input.str());
    if (layers_.empty()) throw Error("Sequential: the model has no layers");
    Shape s = input;
    shapes_.clear();
    specs_.clear();
    names_.clear();
    total_ = 0;
    std::vector<std::string> kinds;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      try {
        s = layers_[l]->build(s);
      } catch (const ShapeError& e) {
        throw ShapeError("Sequential: layer " + std::to_string(l) + " (" + layers_[l]->kind() + "): " + e.what());
      }
      shapes_.push_back(s);
      specs_.push_back(layers_[l]->params());
      std::string base = detail::lower_name(layers_[l]->kind());
      std::size_t seen = 0;
      for (const auto& k : kinds) seen += k == base;
      kinds.push_back(base);
      names_.push_back(seen ? base + "_" + std::to_string(seen) : base);
      for (const auto& p : specs_.back()) total_ += p.shape.elements();
    }
    input_ = input;  // only once every layer accepted it: a failed build leaves the model as it was
    first_trainable_ = layers_.size();
    for (std::size_t l = 0; l < layers_.size() && first_trainable_ == layers_.size(); ++l)
      if (!specs_[l].empty()) first_trainable_ = l;
    Tensor<float> init{Shape{total_}};
    std::size_t off = 0;
    for (std::size_t l = 0; l < layers_.size(); ++l)
      for (std::size_t i = 0; i < specs_[l].size(); ++i) {
        const ParamSpec& p = specs_[l][i];
        const std::size_t n = p.shape.elements();
        if (p.init == Init::GlorotUniform) {
          const float limit = std::sqrt(6.f / static_cast<float>(std::max<std::size_t>(1, p.fan_in + p.fan_out)));
          Rng rng{nn::detail::mix(seed_, l, i)};
          for (std::size_t k = 0; k < n; ++k) init[off + k] = (2.f * rng.uniform() - 1.f) * limit;
        }
        off += n;
      }
    place(std::move(init));
  }

  //! Trains on `data`: a dataset of (features, labels) batches, or one made
  //! by strategy.distribute(...). Returns the per-epoch logs.
  template <class D>
  History fit(const D& data, FitOptions opts = {}) {
    return fit_impl(data, opts, static_cast<const D*>(nullptr));
  }
  //! As fit, evaluating `validation` after each epoch (logs get val_*).
  template <class D, class V>
  History fit(const D& data, FitOptions opts, const V& validation) {
    return fit_impl(data, opts, &validation);
  }

  //! Loss and metrics over `data` (batches of (features, labels)).
  template <class D>
  Logs evaluate(const D& data, EvaluateOptions opts = {}) {
    check_compiled("evaluate");
    const auto& ds = dataset_of(data);
    Totals t = make_totals();
    auto it = ds.iterator();
    std::size_t steps = 0;
    detail::Progress progress(speaker(opts.verbose), opts.out, ds.cardinality());
    const bool own = per_worker(data);
    for (;;) {
      auto e = it.next();
      if (!next_step(e, own, Phase::Evaluate, t, [] {})) break;
      progress.update(++steps, t.samples, [&] { return logs_of(t, ""); });
    }
    across_workers(t);
    Logs logs = logs_of(t, "");
    progress.finish(steps, t.samples, logs);
    return logs;
  }

  //! The model's outputs for every row of `x`, computed `batch_size` rows at a time.
  template <Element T>
  Tensor<float> predict(const Tensor<T>& x, std::size_t batch_size = 32) {
    if (batch_size == 0) throw Error("Sequential::predict: batch_size must be at least 1");
    Tensor<float> holder;
    const Tensor<float>& xf = nn::detail::as_float(x, holder);
    const Shape sample = nn::detail::sample_shape(xf.shape());
    build(sample);
    const std::size_t n = xf.shape()[0];
    Tensor<float> out;
    nn::detail::resize(out, n, shapes_.back());
    Totals t = make_totals();
    Tensor<float> batch;
    if (strategy_->num_workers() > 1) out.fill(0.f);  // each worker writes its rows; a sum joins them
    for (std::size_t b = 0; b < n; b += batch_size) {
      nn::detail::copy_rows(xf, {b, std::min(n, b + batch_size)}, batch);
      step_tensors(batch, nullptr, Phase::Predict, t, &out, b);
    }
    strategy_->sum_across_workers(out.span());
    return out;
  }

  //! The model's outputs for every example of `data`, a dataset (or a
  //! distributed one) of batches: features alone, or (features, labels...)
  //! tuples whose labels are ignored. Rows come back in dataset order.
  template <class D>
    requires(!detail::is_tensor<D>::value)
  Tensor<float> predict(const D& data) {
    const auto& ds = dataset_of(data);
    const bool own = per_worker(data);  // sharded by file: each worker predicts its own rows
    std::vector<Tensor<float>> parts;
    std::size_t rows = 0;
    Totals t = make_totals();
    auto it = ds.iterator();
    while (auto e = it.next()) {
      const auto& xs = features_of(*e);
      const Tensor<float>& x = nn::detail::as_float(xs, x_holder_);
      build(nn::detail::sample_shape(x.shape()));
      Tensor<float> out;
      nn::detail::resize(out, x.shape()[0], shapes_.back());
      if (!own && strategy_->num_workers() > 1) out.fill(0.f);  // rows of other workers: zero before the sum
      step_tensors(x, nullptr, Phase::Predict, t, &out, 0, own ? x.shape()[0] : 0);
      rows += x.shape()[0];
      parts.push_back(std::move(out));
    }
    if (!built()) throw Error("Sequential::predict: the dataset is empty and the model has no Input to build from");
    Tensor<float> all;
    nn::detail::resize(all, rows, shapes_.back());
    float* o = all.data();
    for (const auto& p : parts) o = std::copy_n(p.data(), p.size(), o);
    if (!own) strategy_->sum_across_workers(all.span());
    return all;
  }

  //! A Keras-like table: layers, output shapes, parameter counts. Builds
  //! the model if its Input is known.
  [[nodiscard]] std::string summary() {
    if (!built() && input_) build(*input_);
    if (!built()) throw Error("Sequential::summary: the model is not built yet; give it an Input or call build()");
    std::ostringstream os;
    const std::string rule(65, '_'), dbl(65, '=');
    char b[160];
    os << "Model: \"sequential\" (" << strategy_->name() << ", " << strategy_->num_replicas_in_sync()
       << (strategy_->num_replicas_in_sync() == 1 ? " replica)\n" : " replicas)\n") << rule << "\n";
    std::snprintf(b, sizeof b, " %-28s%-26s%s\n", "Layer (type)", "Output Shape", "Param #");
    os << b << dbl << "\n";
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      std::size_t n = 0;
      for (const auto& p : specs_[l]) n += p.shape.elements();
      std::string shape = "(None";
      for (auto d : shapes_[l].dims()) shape += ", " + std::to_string(d);
      shape += ")";
      std::snprintf(b, sizeof b, " %-28s%-26s%s\n", (names_[l] + " (" + layers_[l]->kind() + ")").c_str(),
                    shape.c_str(), detail::with_commas(n).c_str());
      os << b;
    }
    os << dbl << "\nTotal params: " << detail::with_commas(total_) << "\nTrainable params: "
       << detail::with_commas(total_) << "\nNon-trainable params: 0\n" << rule << "\n";
    return os.str();
  }

  //! The parameters, named "<layer>/<param>" (replica 0's copy under Mirrored).
  [[nodiscard]] std::vector<NamedTensor> get_weights() const {
    check_built("get_weights");
    const Tensor<float>& v = value();
    std::vector<NamedTensor> out;
    std::size_t off = 0;
    for (std::size_t l = 0; l < layers_.size(); ++l)
      for (const auto& p : specs_[l]) {
        Tensor<float> t{p.shape};
        std::copy_n(v.data() + off, t.size(), t.data());
        off += t.size();
        out.push_back({names_[l] + "/" + p.name, std::move(t)});
      }
    return out;
  }
  //! Sets every parameter (all copies). Names and shapes must match
  //! get_weights(); on any mismatch nothing changes.
  void set_weights(const std::vector<NamedTensor>& ws) {
    check_built("set_weights");
    const auto mine = get_weights();
    if (ws.size() != mine.size())
      throw ShapeError("set_weights: the model has " + std::to_string(mine.size()) + " parameter tensors, got " +
                       std::to_string(ws.size()));
    Tensor<float> flat{Shape{total_}};
    std::size_t off = 0;
    for (std::size_t i = 0; i < ws.size(); ++i) {
      if (ws[i].name != mine[i].name || ws[i].value.shape() != mine[i].value.shape())
        throw ShapeError("set_weights: tensor " + std::to_string(i) + " is " + ws[i].name + " " +
                         ws[i].value.shape().str() + " but the model expects " + mine[i].name + " " +
                         mine[i].value.shape().str());
      std::copy_n(ws[i].value.data(), ws[i].value.size(), flat.data() + off);
      off += ws[i].value.size();
    }
    if (ParameterServerRuntime* ps = strategy_->parameter_servers()) ps->assign(flat.span());
    std::visit([&](auto& var) { var.assign(flat); }, *params_);
  }
  void save_weights(const std::filesystem::path& path) const { write_weights(path, get_weights()); }
  //! Loads weights saved by save_weights; a file for another architecture
  //! or a corrupt file raises an Error and leaves the model unchanged.
  void load_weights(const std::filesystem::path& path) {
    auto ws = read_weights(path);
    try {
      set_weights(ws);
    } catch (const ShapeError& e) {
      throw ShapeError("load_weights: " + path.string() + " does not fit this model: " + e.what());
    }
  }

 private:
  enum class Phase { Train, Evaluate, Predict };

  struct Totals {
    double loss = 0;  // sums over the rows this worker computed...
    std::vector<double> metrics;
    std::size_t samples = 0;  // rows of every worker
    std::size_t local = 0;    // ...which are these many (all of them in one process)
  };

  struct Replica {
    std::vector<std::unique_ptr<Layer>> layers;
    std::vector<Tensor<float>> acts;
    Tensor<float> x, y, d[2];
    Tensor<float> grad;
    double loss = 0;
    std::vector<double> metrics;
    std::size_t rows = 0;
  };

  using Params = std::variant<MirroredVariable<float>, CentralVariable<float>>;

  template <class E>
  static const auto& features_of(const E& e) {
    if constexpr (detail::is_tensor<E>::value) return e;
    else return std::get<0>(e);
  }

  [[nodiscard]] const Tensor<float>& value() const {
    return std::visit([](const auto& v) -> const Tensor<float>& { return v.value(); }, *params_);
  }

  void place(Tensor<float> init) {
    // under a parameter server: copy 0 is the chief's (evaluate, predict,
    // get_weights), copy 1 + w worker w's pull of the servers' value
    ParameterServerRuntime* ps = strategy_->parameter_servers();
    const int p = ps ? ps->num_workers() + 1 : strategy_->num_local_replicas();
    const bool central = strategy_->placement() == PlacementKind::CentralStorage;
    strategy_->broadcast_from_chief(init.span());  // across workers: everyone starts from the chief's weights
    if (central) params_.emplace(std::in_place_type<CentralVariable<float>>, init, p);
    else params_.emplace(std::in_place_type<MirroredVariable<float>>, init, p);
    replicas_.clear();
    replicas_.resize(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
      Replica& rep = replicas_[static_cast<std::size_t>(r)];
      rep.grad = Tensor<float>{Shape{total_}};
      rep.acts.resize(layers_.size());
      std::span<const float> v = central ? std::get<CentralVariable<float>>(*params_).value().span()
                                         : std::get<MirroredVariable<float>>(*params_).copy(r).span();
      std::size_t off = 0;
      for (std::size_t l = 0; l < layers_.size(); ++l) {
        rep.layers.push_back(layers_[l]->clone());
        std::vector<ParamRef> refs;
        for (const auto& ps : specs_[l]) {
          const std::size_t n = ps.shape.elements();
          refs.push_back({v.subspan(off, n), rep.grad.span().subspan(off, n)});
          off += n;
        }
        rep.layers.back()->bind(refs);
      }
    }
    make_states();
  }

  //! Fresh optimizer state, one per variable copy (Mirrored: per replica;
  //! CentralStorage: one; ParameterServer: one, the servers', which update
  //! only their shards' elements of it).
  void make_states() {
    if (!optimizer_ || !built()) return;
    states_.clear();
    if (ParameterServerRuntime* ps = strategy_->parameter_servers()) {
      states_.push_back(optimizer_->make_state(total_));
      std::vector<Shape> shapes;
      for (const auto& layer : specs_)
        for (const auto& ps_spec : layer) shapes.push_back(ps_spec.shape);
      ps->create_variables(shapes, value(),
                           [opt = optimizer_.get(), st = &states_[0]](std::span<float> w, std::span<const float> g,
                                                                     std::size_t offset, std::uint64_t step) {
                             opt->apply(w, g, *st, offset, static_cast<std::int64_t>(step));
                           });
      return;
    }
    const bool central = std::holds_alternative<CentralVariable<float>>(*params_);
    for (std::size_t r = 0; r < (central ? 1 : replicas_.size()); ++r) states_.push_back(optimizer_->make_state(total_));
  }

  template <class D>
  const auto& dataset_of(const D& data) const {
    if constexpr (detail::is_distributed<D>::value) {
      if (data.strategy != strategy_)
        throw Error("Sequential: the dataset was distributed by another strategy than the one this model was made "
                    "under; make the model inside that strategy's scope");
      return data.dataset;
    } else {
      return data;
    }
  }

  //! Across workers only the chief prints.
  [[nodiscard]] Verbosity speaker(Verbosity v) const noexcept {
    return strategy_->worker_index() == 0 ? v : Verbosity::Silent;
  }

  //! Collective across workers: the totals of every worker's rows (running
  //! logs within an epoch cover this worker's rows only).
  void across_workers(Totals& t) const {
    if (strategy_->num_workers() == 1) return;
    std::vector<double> v{t.loss, static_cast<double>(t.local)};
    v.insert(v.end(), t.metrics.begin(), t.metrics.end());
    strategy_->sum_across_workers(v);
    t.loss = v[0];
    t.local = static_cast<std::size_t>(v[1]);
    std::copy(v.begin() + 2, v.end(), t.metrics.begin());
  }

  Totals make_totals() const {
    Totals t;
    t.metrics.assign(metrics_.size(), 0.0);
    return t;
  }

  Logs logs_of(const Totals& t, const std::string& prefix) const {
    Logs l;
    const double n = t.local ? static_cast<double>(t.local) : 1.0;
    l.set(prefix + "loss", t.loss / n + regularization_loss());
    for (std::size_t m = 0; m < metrics_.size(); ++m) l.set(prefix + metrics_[m]->name(), t.metrics[m] / n);
    return l;
  }

  void check_compiled(const char* what) const {
    if (!optimizer_ || !loss_)
      throw Error(std::string("Sequential::") + what + ": compile the model first (optimizer and loss)");
  }
  void check_built(const char* what) const {
    if (!built()) throw Error(std::string("Sequential::") + what + ": the model is not built yet");
  }

  template <class D, class V>
  History fit_impl(const D& data, const FitOptions& opts, const V* validation) {
    check_compiled("fit");
    ParameterServerRuntime* ps = strategy_->parameter_servers();
    if (ps && ps->role() != ParameterServerRuntime::Role::Chief) return serve_ps(*ps, dataset_of(data));
    if (!ps) return fit_epochs(data, opts, validation);
    try {
      History h = fit_epochs(data, opts, validation);
      ps->end_training(value().span());  // the servers and workers of other processes return from fit with it
      return h;
    } catch (...) {
      if (built()) ps->end_training(value().span());
      throw;
    }
  }

  //! fit on a server or worker process of a parameter server over MPI:
  //! serve the chief until it ends training, then hold its trained value.
  //! Returns no history (the chief's fit has it).
  template <class Ds>
  History serve_ps(ParameterServerRuntime& ps, const Ds& ds) {
    if (!built()) {
      auto e = ds.iterator().next();
      if (e) build(nn::detail::sample_shape(nn::detail::as_float(std::get<0>(*e), x_holder_).shape()));
      else if (input_) build(*input_);
      else throw Error("Sequential::fit: the dataset is empty and the model has no Input to build from");
    }
    ps.set_step([this, &ps](int w, const StepInput& in) { return ps_step(ps, w, in); });
    Tensor<float> trained{Shape{total_}};
    ps.serve(trained.span());
    std::visit([&](auto& var) { var.assign(trained); }, *params_);
    return {};
  }

  template <class D, class V>
  History fit_epochs(const D& data, const FitOptions& opts, const V* validation) {
    const auto& ds = dataset_of(data);
    History history;
    for (auto* cb : opts.callbacks) {
      cb->stop_training = false;
      cb->on_train_begin();
    }
    Logs logs;
    bool stop = false;
    for (int epoch = 0; epoch < opts.epochs && !stop; ++epoch) {
      for (auto* cb : opts.callbacks) cb->on_epoch_begin(epoch);
      const Verbosity verbose = speaker(opts.verbose);
      if (verbose != Verbosity::Silent) std::fprintf(opts.out, "Epoch %d/%d\n", epoch + 1, opts.epochs);
      std::optional<std::size_t> total = ds.cardinality();
      if (opts.steps_per_epoch) total = total ? std::min(*total, opts.steps_per_epoch) : opts.steps_per_epoch;
      detail::Progress progress(verbose, opts.out, total);
      Totals t = make_totals();
      auto it = ds.iterator();
      std::size_t steps = 0;
      const bool own = per_worker(data);
      const auto batch_end = [&] {
        // running logs (an O(parameters) regularization sum with L2) only for whoever reads them
        progress.update(steps, t.samples, [&] { return logs_of(t, ""); });
        if (!opts.callbacks.empty()) {
          const Logs running = logs_of(t, "");
          for (auto* cb : opts.callbacks) {
            cb->on_batch_end(static_cast<int>(steps - 1), running);
            stop = stop || cb->stop_training;
          }
        }
      };
      if (ParameterServerRuntime* ps = strategy_->parameter_servers()) {
        train_epoch_ps(
            *ps, it, opts, t, steps, stop,
            [&](std::size_t step) {
              for (auto* cb : opts.callbacks) cb->on_batch_begin(static_cast<int>(step));
            },
            batch_end);
      } else {
        while (!stop && (!opts.steps_per_epoch || steps < opts.steps_per_epoch)) {
          auto e = it.next();
          const auto begin = [&] {
            for (auto* cb : opts.callbacks) cb->on_batch_begin(static_cast<int>(steps));
          };
          if (!next_step(e, own, Phase::Train, t, begin)) break;
          ++steps;
          batch_end();
        }
      }
      across_workers(t);
      logs = logs_of(t, "");
      if (validation) {
        const Logs val = evaluate(*validation);
        for (const auto& [k, v] : val.items()) logs.set("val_" + k, v);
      }
      progress.finish(steps, t.samples, logs);
      history.append(logs);
      for (auto* cb : opts.callbacks) {
        cb->on_epoch_end(epoch, logs);
        stop = stop || cb->stop_training;
      }
    }
    for (auto* cb : opts.callbacks) cb->on_train_end(logs);
    return history;
  }

  template <class D>
  static bool per_worker(const D& data) {
    if constexpr (detail::is_distributed<D>::value) return data.per_worker;
    else return false;
  }

  //! Runs the step of batch `e` (nullopt: the pass ended here). With the
  //! whole global batch on every worker (`own` false) a pass ends when the
  //! dataset does. With each worker's own share (`own`, sharded by file) the
  //! workers first agree on the global batch, a worker at its end takes part
  //! with an empty share, and the pass ends when every worker's has. False
  //! at the end of the pass.
  template <class E, class Begin>
  bool next_step(const std::optional<E>& e, bool own, Phase phase, Totals& t, Begin begin) {
    if (!own) {
      if (!e) return false;
      begin();
      step(*e, phase, t, nullptr, 0, 0);
      return true;
    }
    double rows[1] = {e ? static_cast<double>(std::get<0>(*e).shape()[0]) : 0.0};
    strategy_->sum_across_workers(rows);
    const auto global = static_cast<std::size_t>(rows[0]);
    if (global == 0) return false;
    begin();
    if (e) {
      step(*e, phase, t, nullptr, 0, global);
      return true;
    }
    if (!built()) {
      if (!input_)
        throw Error("Sequential: this worker's share of the data is empty while others train; give the model an "
                    "Input so that it can build without data");
      build(*input_);
    }
    // an empty share: no rows, but the same collectives as the others
    std::vector<std::size_t> xd{0}, yd{0};
    xd.insert(xd.end(), input_->dims().begin(), input_->dims().end());
    yd.insert(yd.end(), label_tail_.begin(), label_tail_.end());
    const Tensor<float> x{Shape(xd)}, y{Shape(yd)};
    step_tensors(x, &y, phase, t, nullptr, 0, global);
    return true;
  }

  //! One batch (an element of the dataset: (features, labels)): the global
  //! batch, or with `global` > 0 this worker's share of a global batch of
  //! `global` rows.
  template <class E>
  void step(const E& e, Phase phase, Totals& t, Tensor<float>* out, std::size_t out_row, std::size_t global) {
    const auto [x, y] = labelled_batch(e);
    step_tensors(x, &y, phase, t, out, out_row, global);
  }

  //! A (features, labels) element as float tensors, checked to have the same
  //! batch extent; builds the model for its sample shape.
  template <class E>
  std::pair<const Tensor<float>&, const Tensor<float>&> labelled_batch(const E& e) {
    const Tensor<float>& x = nn::detail::as_float(std::get<0>(e), x_holder_);
    const Tensor<float>& y = nn::detail::as_float(std::get<1>(e), y_holder_);
    if (x.shape().rank() == 0 || y.shape().rank() == 0 || x.shape()[0] != y.shape()[0])
      throw ShapeError("Sequential: a batch's features " + x.shape().str() + " and labels " + y.shape().str() +
                       " must have the same first (batch) extent");
    build(nn::detail::sample_shape(x.shape()));
    label_tail_.assign(y.shape().dims().begin() + 1, y.shape().dims().end());
    return {x, y};
  }

  //! `own_global` 0: `x` is the global batch, split over every replica of
  //! every worker; otherwise `x` is this worker's share of a global batch of
  //! `own_global` rows, split over the local replicas.
  void step_tensors(const Tensor<float>& x, const Tensor<float>* y, Phase phase, Totals& t, Tensor<float>* out,
                    std::size_t out_row, std::size_t own_global = 0) {
    const std::size_t global = own_global ? own_global : x.shape()[0];
    if (global == 0) return;
    const bool own = own_global != 0;
    // over every worker, or over this worker's replicas
    const auto p = static_cast<std::size_t>(own ? strategy_->num_local_replicas() : strategy_->num_replicas_in_sync());
    const float scale = 1.f / static_cast<float>(global);
    const std::int64_t it = iterations_;
    strategy_->run([&](AnyReplicaContext& ctx) {
      const auto r = static_cast<std::size_t>(ctx.local_replica_id());
      const auto g = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
      Replica& rep = replicas_[r];
      const Range rows = own ? shard_range(x.shape()[0], p, r) : shard_range(global, p, g);  // this replica's rows
      rep.rows = rows.size();
      nn::detail::copy_rows(x, rows, rep.x);
      if (y) nn::detail::copy_rows(*y, rows, rep.y);
      const Tensor<float>& pred =
          forward(rep, RunInfo{phase == Phase::Train, static_cast<int>(g), seed_, static_cast<std::uint64_t>(it), 0});
      if (phase == Phase::Predict) {
        const std::size_t w = pred.shape()[0] ? pred.size() / pred.shape()[0] : 0;
        if (pred.size()) std::copy_n(pred.data(), pred.size(), out->data() + (out_row + rows.begin) * w);
        return;
      }
      rep.loss = loss_->compute(pred, rep.y, phase == Phase::Train ? &rep.d[0] : nullptr, scale);
      rep.metrics.resize(metrics_.size());
      for (std::size_t m = 0; m < metrics_.size(); ++m) rep.metrics[m] = metrics_[m]->total(pred, rep.y);
      if (phase != Phase::Train) return;
      backward(rep, r, static_cast<std::size_t>(strategy_->num_replicas_in_sync()));
      apply(ctx, rep, r, it);
    });
    // the replicas this process ran (under a parameter server: the chief's, 0)
    const auto ran = static_cast<std::size_t>(strategy_->num_local_replicas());
    if (phase != Phase::Predict)
      for (const Replica& rep : std::span(replicas_).first(ran)) {  // replica order: deterministic
        t.loss += rep.loss;
        t.local += rep.rows;
        for (std::size_t m = 0; m < metrics_.size(); ++m) t.metrics[m] += rep.metrics[m];
      }
    t.samples += global;
    if (phase == Phase::Train) ++iterations_;
  }

  //! The layers' outputs for rep.x; returns the last.
  const Tensor<float>& forward(Replica& rep, RunInfo info) {
    const Tensor<float>* in = &rep.x;
    for (std::size_t l = 0; l < rep.layers.size(); ++l) {
      info.layer = l;
      rep.layers[l]->forward(*in, rep.acts[l], info);
      in = &rep.acts[l];
    }
    return *in;
  }

  //! A training step on parameter-server worker `w`: pull the servers'
  //! value into the worker's copy, compute the gradient of the batch's mean
  //! loss, push it. Dropout is keyed by the step's number, not the worker,
  //! so a rescheduled step draws the same masks.
  StepOutput ps_step(ParameterServerRuntime& ps, int w, const StepInput& in) {
    const auto r = static_cast<std::size_t>(w) + 1;
    Replica& rep = replicas_.at(r);
    ps.pull(w, std::get<MirroredVariable<float>>(*params_).copy(static_cast<int>(r)).span());
    rep.rows = in.x.shape()[0];
    nn::detail::copy_rows(in.x, {0, rep.rows}, rep.x);
    nn::detail::copy_rows(in.y, {0, rep.rows}, rep.y);
    const Tensor<float>& pred = forward(rep, RunInfo{true, 0, seed_, static_cast<std::uint64_t>(in.iteration), 0});
    const float scale = rep.rows ? 1.f / static_cast<float>(rep.rows) : 0.f;
    StepOutput out;
    out.loss = loss_->compute(pred, rep.y, &rep.d[0], scale);
    for (const auto& m : metrics_) out.metrics.push_back(m->total(pred, rep.y));
    out.rows = rep.rows;
    backward(rep, r, 1);
    ps.push(w, rep.grad.span());
    return out;
  }

  //! One pass of fit under a parameter server (the chief): each batch is a
  //! step scheduled on some worker, at most two per worker in flight;
  //! results are taken in order (logs, progress and callbacks as in
  //! synchronous training). The chief's copy holds the servers' value after.
  template <class It, class Begin, class Update>
  void train_epoch_ps(ParameterServerRuntime& ps, It& it, const FitOptions& opts, Totals& t, std::size_t& steps,
                      bool& stop, Begin begin, Update on_step) {
    ps.set_step([this, &ps](int w, const StepInput& in) { return ps_step(ps, w, in); });
    std::deque<RemoteValue<StepOutput>> inflight;
    const auto window = 2 * static_cast<std::size_t>(ps.num_workers());
    std::size_t scheduled = 0;
    const auto collect = [&] {
      const StepOutput out = inflight.front().get();
      inflight.pop_front();
      t.loss += out.loss;
      t.local += out.rows;
      t.samples += out.rows;
      for (std::size_t m = 0; m < metrics_.size() && m < out.metrics.size(); ++m) t.metrics[m] += out.metrics[m];
      ++steps;
      on_step();
    };
    try {
      while (!stop && (!opts.steps_per_epoch || scheduled < opts.steps_per_epoch)) {
        auto e = it.next();
        if (!e) break;
        const auto [x, y] = labelled_batch(*e);
        begin(scheduled);
        inflight.push_back(ps.schedule(StepInput{x, y, iterations_++}));
        ++scheduled;
        while (inflight.size() > window) collect();
      }
      while (!inflight.empty()) collect();
      ps.join();
    } catch (...) {
      try {
        ps.join();  // the steps still running use this model
      } catch (...) {
      }
      throw;
    }
    if (built()) ps.read(std::get<MirroredVariable<float>>(*params_).copy(0).span());
  }

  void backward(Replica& rep, std::size_t r, std::size_t p) {
    int cur = 0;
    for (std::size_t l = rep.layers.size(); l-- > 0;) {
      const Tensor<float>& in = l ? rep.acts[l - 1] : rep.x;
      const bool need_dx = l > first_trainable_;
      rep.layers[l]->backward(in, rep.acts[l], rep.d[cur], need_dx ? &rep.d[1 - cur] : nullptr);
      if (!need_dx) break;
      cur = 1 - cur;
    }
    // L2: every replica adds its 1/p share of the gradient, so the sum adds it once
    const Tensor<float>& v = replica_value(r);
    for_each_l2([&](std::size_t off, std::size_t n, float l2) {
      const float k = 2.f * l2 / static_cast<float>(p);
      for (std::size_t i = off; i < off + n; ++i) rep.grad[i] += k * v[i];
    });
  }

  //! f(offset, count, l2) for every parameter with an L2 regularizer.
  template <class F>
  void for_each_l2(F&& f) const {
    std::size_t off = 0;
    for (const auto& layer : specs_)
      for (const auto& ps : layer) {
        const std::size_t n = ps.shape.elements();
        if (ps.l2 > 0.f) f(off, n, ps.l2);
        off += n;
      }
  }

  //! Sum of l2 * sum(w^2) over the regularized parameters (part of the reported loss, as in Keras).
  [[nodiscard]] double regularization_loss() const {
    if (!built()) return 0;
    const Tensor<float>& v = value();
    double total = 0;
    for_each_l2([&](std::size_t off, std::size_t n, float l2) {
      double sq = 0;
      for (std::size_t i = off; i < off + n; ++i) sq += static_cast<double>(v[i]) * v[i];
      total += l2 * sq;
    });
    return total;
  }

  const Tensor<float>& replica_value(std::size_t r) const {
    if (auto* m = std::get_if<MirroredVariable<float>>(&*params_)) return m->copy(static_cast<int>(r));
    return std::get<CentralVariable<float>>(*params_).value();
  }

  void apply(AnyReplicaContext& ctx, Replica& rep, std::size_t r, std::int64_t it) {
    if (auto* m = std::get_if<MirroredVariable<float>>(&*params_)) {
      OptimizerState& st = states_[r];
      m->apply_gradient(ctx, rep.grad, [&](std::span<float> w, std::span<const float> g) {
        optimizer_->apply(w, g, st, 0, it);
      });
    } else {
      OptimizerState& st = states_[0];
      std::get<CentralVariable<float>>(*params_).apply_gradient(
          ctx, rep.grad,
          [&](std::span<float> w, std::span<const float> g, std::size_t off) { optimizer_->apply(w, g, st, off, it); });
    }
  }

  AnyStrategy* strategy_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::optional<Shape> input_;
  std::vector<Shape> shapes_;
  std::vector<std::vector<ParamSpec>> specs_;
  std::vector<std::string> names_;
  std::size_t total_ = 0, first_trainable_ = 0;
  std::vector<std::size_t> label_tail_;  // a label's shape past the batch axis (for an empty share)
  std::optional<Params> params_;
  std::vector<Replica> replicas_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  std::vector<std::unique_ptr<Metric>> metrics_;
  std::vector<OptimizerState> states_;
  std::uint64_t seed_ = 0;
  std::int64_t iterations_ = 0;
  Tensor<float> x_holder_, y_holder_;
};

}  // namespace strata::nn
