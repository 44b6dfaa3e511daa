#pragma once
//! Model: a trainable graph of layers, Keras-style — a functional model
//! made from nodes (nn/program/node.hpp), or a Sequential (nn/model/sequential.hpp, a
//! chain). The model describes (layers, build, summary, weights, compile);
//! the strategy in whose scope it was made (the default strategy otherwise)
//! executes fit / evaluate / predict through its placement's executor
//! (execution/executor.hpp).
//!   strata::nn::Node x = strata::nn::Input{{64}};
//!   strata::nn::Node h = strata::nn::Add{}(x, strata::nn::Dense{64}(x));
//!   auto model = strategy.scope([&] { return strata::nn::Model{x, strata::nn::Dense{10}(h)}; });
//!   model.compile(strata::nn::Adam{1e-3}, strata::nn::SparseCategoricalCrossentropy{{.from_logits = true}});
//!   model.fit(strategy.distribute(train), {.epochs = 5});
//! The model code does not change with the strategy. Under synchronous
//! strategies p replicas take the same step as one replica on the whole
//! global batch; same seed, strategy and replica count give bitwise-identical
//! weights (all reductions run in a fixed order). The strategy must outlive
//! the model.

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/nn/callbacks/backup_and_restore.hpp>
#include <strata/nn/checkpoints/checkpoint.hpp>
#include <strata/nn/program/data_pass.hpp>
#include <strata/nn/fit/fit_backup.hpp>
#include <strata/nn/fit/fit_loop.hpp>
#include <strata/nn/layers/layer.hpp>
#include <strata/nn/callbacks/logs.hpp>
#include <strata/nn/fit/model_options.hpp>
#include <strata/nn/program/model_program.hpp>
#include <strata/nn/checkpoints/named_weights.hpp>
#include <strata/nn/program/node.hpp>
#include <strata/nn/fit/summary.hpp>
#include <strata/nn/fit/train_step.hpp>
#include <strata/nn/checkpoints/weights_file.hpp>
#include <strata/strategy/strategy.hpp>

namespace strata::nn {

class Model {
 public:
  //! The functional model of the layers between `input` (the Node made
  //! from an Input) and `output` (nn/program/node.hpp); layers that `output` does
  //! not depend on are left out.
  Model(const Node& input, const Node& output) : Model("Model") {
    auto cut = detail::cut_graph(input, output);
    m_->layers = std::move(cut.layers);
    m_->inputs = std::move(cut.inputs);
    input_ = input.graph()->input;
  }
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;
  virtual ~Model() = default;

  [[nodiscard]] bool built() const noexcept { return ex_->placed(); }
  [[nodiscard]] AnyStrategy& strategy() const noexcept { return *strategy_; }
  [[nodiscard]] std::size_t count_params() const noexcept { return m_->total; }
  [[nodiscard]] std::int64_t iterations() const noexcept { return iterations_; }
  [[nodiscard]] const std::vector<std::unique_ptr<Layer>>& layers() const noexcept { return m_->layers; }

  //! Sets the loss, optimizer and metrics (before fit/evaluate).
  template <std::derived_from<Optimizer> O, std::derived_from<Loss> L>
  void compile(O optimizer, L loss, MetricList metrics = {}, CompileOptions opts = {}) {
    m_->optimizer = std::make_unique<O>(std::move(optimizer));
    m_->loss = std::make_unique<L>(std::move(loss));
    m_->metrics = std::move(metrics.items());
    for (auto& m : m_->metrics) m->set_loss(*m_->loss);
    m_->seed = opts.seed;  // a model built before compile keeps the weights it was built with
    if (opts.steps_per_execution == 0) throw Error(kind_ + "::compile: steps_per_execution must be at least 1");
    steps_per_execution_ = opts.steps_per_execution;
    iterations_ = 0;       // a new optimizer starts at step 0 (bias correction, schedules)
    loop_ = {};
    if (built()) ex_->reset_optimizer();
  }

  //! Builds for a per-sample input shape: infers every layer's shapes,
  //! initializes the parameters (seeded) and has the strategy place them.
  void build(const Shape& input) {
    if (built()) {
      if (input != *input_) throw ShapeError(kind_ + ": built for per-sample input " + input_->str() + ", got " + input.str());
      return;
    }
    if (input_ && *input_ != input)
      throw ShapeError(kind_ + ": declared Input " + input_->str() + " but the data has per-sample shape " + input.str());
    if (m_->layers.empty()) throw Error(kind_ + ": the model has no layers");
    Tensor<float> init = m_->build(input);
    input_ = input;  // only once every layer accepted it: a failed build leaves the model as it was
    ex_->place(init);
  }

  //! Trains on `data` ((features, labels) batches, or strategy.distribute(...)); returns
  //! the per-epoch logs (empty on the parameter-server ranks that serve the chief's fit).
  template <class D>
  History fit(const D& data, FitOptions opts = {}) {
    return fit_impl(data, opts, static_cast<const D*>(nullptr));
  }
  //! As fit, evaluating `validation` after each epoch (logs get val_*).
  template <class D, class V>
  History fit(const D& data, FitOptions opts, const V& validation) {
    return fit_impl(data, opts, &validation);
  }

  //! One training step of a custom loop (docs/custom-loops.md) on `batch`:
  //! an element of strategy.distribute(ds) (or a (features, labels) batch).
  //! It is fit's step (the same split, reduction and update: the same bits), `hook` seeing each
  //! replica's gradient between its backward and the reduction; not under ParameterServerStrategy
  //! (Error: its steps are asynchronous). Returns the logs of the steps since reset_metrics().
  //!   for (const auto& b : strategy.distribute(train)) logs = model.train_step(b, clip);
  template <class B>
  Logs train_step(const B& batch, GradientHook hook = {}) {
    check_compiled("train_step");
    detail::OneElement it{&detail::element_of(batch, strategy_)};
    detail::FnPass pass = data_pass(it, detail::per_worker_batch(batch), std::nullopt, Phase::Train);
    detail::custom_step(pass, std::move(hook), loop_);
    loop_.add(ex_->run_pass(pass));
    return logs_of(loop_.totals);
  }
  void reset_metrics() { loop_.reset(); }  //!< train_step's logs start afresh (Keras' reset_metrics)

  //! Loss and metrics over `data` (batches of (features, labels)).
  template <class D>
  Logs evaluate(const D& data, EvaluateOptions opts = {}) {
    check_compiled("evaluate");
    const auto& ds = dataset_of(data);
    detail::Progress progress(speaker(opts.verbose), opts.out, ds.cardinality());
    auto it = ds.iterator();
    std::size_t steps = 0;
    auto pass = data_pass(it, detail::per_worker(data), ds.cardinality(), Phase::Evaluate);
    pass.end_fn = [&](std::size_t s, const PassTotals& t) {
      progress.update(steps = s + 1, t.samples, [&] { return logs_of(t); });
      return false;
    };
    const PassTotals t = ex_->run_pass(pass);
    if (t.samples == 0)  // a loss and accuracy of 0 would read as a result
      throw Error(kind_ + "::evaluate: the dataset gave no batches (or only empty ones): nothing to evaluate. "
                  "Check its size against its batch size and any take, skip or filter");
    Logs logs = logs_of(t);
    progress.finish(steps, t.samples, logs);
    return logs;
  }

  //! The model's outputs for every row of `x`, computed `batch_size` rows at a time.
  template <Element T>
  Tensor<float> predict(const Tensor<T>& x, std::size_t batch_size = 32) {
    if (batch_size == 0) throw Error(kind_ + "::predict: batch_size must be at least 1");
    Tensor<float> holder, batch;
    const Tensor<float>& xf = detail::as_float(x, holder);
    build(detail::sample_shape(xf.shape()));
    const std::size_t n = xf.shape()[0];
    Tensor<float> out;
    detail::resize(out, n, m_->shapes.back());
    detail::FnPass pass;
    detail::predict_rows(pass, xf, batch_size, out.data(), m_->output_width(), batch, &iterations_);
    ex_->run_pass(pass);
    ex_->join_predictions(out.span(), false);
    return out;
  }

  //! The model's outputs for every example of `data`, a dataset (or a
  //! distributed one) of batches: features alone, or (features, labels...)
  //! tuples whose labels are ignored. Rows come back in dataset order.
  template <class D>
    requires(!detail::is_tensor<D>::value)
  Tensor<float> predict(const D& data) {
    const auto& ds = dataset_of(data);
    auto it = ds.iterator();
    std::vector<Tensor<float>> parts;
    detail::FnPass pass = feed_.predict_pass(
        it, [this](const Shape& sample) { build(sample); },
        [this](std::size_t rows) { return Tensor<float>(detail::batch_shape(rows, m_->shapes.back())); }, parts,
        steps_per_execution_);
    pass.per_worker = detail::per_worker(data);  // sharded by file: each worker predicts its own rows
    pass.iteration = &iterations_;
    ex_->run_pass(pass);
    if (!built()) throw Error(kind_ + "::predict: the dataset is empty and the model has no Input to build from");
    std::size_t rows = 0;
    for (const auto& p : parts) rows += p.shape()[0];
    Tensor<float> all;
    detail::resize(all, rows, m_->shapes.back());
    float* o = all.data();
    for (const auto& p : parts) o = std::copy_n(p.data(), p.size(), o);
    ex_->join_predictions(all.span(), pass.per_worker);
    return all;
  }

  //! How the replicas' gradients are summed and why, once the model is
  //! built: "2 replicas share GPU 0 (virtual GPUs): a direct reduce kernel
  //! ..." for GPU replicas (and, across workers, how the sums cross them);
  //! empty where nothing is chosen at run time (CPU replicas: the reduce policy).
  [[nodiscard]] std::string gradient_reduction() const { return ex_->collectives_choice(); }

  //! A Keras-like table: layers, output shapes, parameter counts. Builds
  //! the model if its Input is known.
  [[nodiscard]] std::string summary() {
    if (!built() && input_) build(*input_);
    if (!built()) throw Error(kind_ + "::summary: the model is not built yet; give it an Input or call build()");
    return detail::summary_table(*m_, *strategy_);
  }

  //! The parameters, named "<layer>/<param>" (the logical value: replica 0's copy under Mirrored).
  [[nodiscard]] std::vector<NamedTensor> get_weights() const {
    check_built("get_weights");
    return detail::named_weights(*m_, ex_->value());
  }
  //! Sets every parameter (all copies). Names and shapes must match
  //! get_weights(); on any mismatch nothing changes.
  void set_weights(const std::vector<NamedTensor>& ws) {
    check_built("set_weights");
    ex_->assign(detail::flat_weights(ws, get_weights(), m_->total));
  }
  //! Writes the weights (nn/checkpoints/weights_file.hpp); under several workers the chief alone writes (write_on_chief).
  void save_weights(const std::filesystem::path& path) const {
    const auto ws = get_weights();
    detail::write_on_chief(is_chief(), "save_weights", path, [&] { write_weights(path, ws); });
  }

  //! Writes a checkpoint (nn/checkpoints/checkpoint.hpp): the weights, the optimizer's
  //! state, the step count and `pos` (where in fit; default: no epoch
  //! begun), atomically. Under several workers call it on every worker or
  //! on the chief alone (every worker if state_reads_collective()): the chief alone writes.
  //! `extra`: more metadata (BackupAndRestore adds its run's identity).
  void save_checkpoint(const std::filesystem::path& path, TrainingPosition pos = {},
                       const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    check_built("save_checkpoint");
    check_compiled("save_checkpoint");
    pos.step = iterations_;
    io::TensorFile f = detail::make_checkpoint(*m_, get_weights(), ex_->optimizer_state(), pos,
                                               ex_->update_counters(), strategy_->name(),
                                               strategy_->num_replicas_in_sync());
    f.meta.insert(f.meta.end(), extra.begin(), extra.end());
    detail::write_on_chief(is_chief(), "save_checkpoint", path, [&] { io::write_tensor_file(path, f, "save_checkpoint"); });
  }
  //! Loads a checkpoint written under any strategy: weights, optimizer
  //! state and step count (all or nothing); returns where fit was.
  TrainingPosition load_checkpoint(const std::filesystem::path& path) {
    check_built("load_checkpoint");
    check_compiled("load_checkpoint");
    const std::string where = "load_checkpoint: " + path.string();
    io::TensorFile f = io::read_tensor_file(path, "load_checkpoint");
    TrainingPosition pos = detail::position_of(f, where);
    auto parts = detail::checkpoint_parts(*m_, f, where);
    try {
      set_weights(parts.weights);
    } catch (const ShapeError& e) {
      throw ShapeError(where + " does not fit this model: " + e.what());
    }
    ex_->set_optimizer_state(parts.slots);
    ex_->set_update_counters(parts.update_counters, pos.step);
    iterations_ = pos.step;
    return pos;
  }
  //! The compiled optimizer (the executor's copies share its learning rate's run-time override).
  [[nodiscard]] Optimizer& optimizer() const { return check_compiled("optimizer"), *m_->optimizer; }
  //! Under several workers: whether this one is the chief (the one that prints and writes).
  [[nodiscard]] bool is_chief() const noexcept { return ex_->is_chief(); }
  //! Whether reading the state is collective (ZeRO 2 and 3 across workers: each holds its
  //! shards only): then every worker calls save_checkpoint (stage 3: get_weights, save_weights too).
  [[nodiscard]] bool state_reads_collective() const noexcept { return ex_ && ex_->state_reads_collective(); }
  //! Whether a checkpoint between two training steps is consistent (not under a parameter server).
  [[nodiscard]] bool state_settled_between_steps() const noexcept { return ex_->state_settled_between_steps(); }
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

 protected:
  //! An empty model of kind `kind` ("Sequential", "Model"), made in the current strategy's scope.
  explicit Model(std::string kind)
      : strategy_(&current_strategy()), m_(std::make_unique<detail::LayerProgram>()),
        ex_(strategy_->make_executor(*m_)), kind_(std::move(kind)) {
    m_->kind = kind_;
  }

 private:
  template <class D>
  const auto& dataset_of(const D& data) const { return detail::dataset_of(data, strategy_); }

  //! A pass over iterator `it`'s (features, labels) batches (detail::BatchFeed), the model built for each.
  template <class It>
  detail::FnPass data_pass(It& it, bool per_worker, std::optional<std::size_t> batches, Phase phase) {
    detail::FnPass pass = feed_.pass(
        it, [this](const Shape& sample) { build(sample); },
        [this] {
          if (!built()) {
            if (!input_)
              throw Error(kind_ + ": this process's share of the data is empty while others train; give the model "
                          "an Input so that it can build without data");
            build(*input_);
          }
          return *input_;
        },
        steps_per_execution_);
    pass.phase = phase;
    pass.per_worker = per_worker;
    pass.batches = batches;
    pass.iteration = &iterations_;
    return pass;
  }

  template <class D, class V>
  History fit_impl(const D& data, const FitOptions& opts, const V* validation) {
    check_compiled("fit");
    const auto& ds = dataset_of(data);
    BackupAndRestore* backup_of = detail::backup_among(opts.callbacks);
    std::optional<std::size_t> global_batch;  // the first batch's rows (a backed-up run records it)
    std::vector<std::pair<std::string, std::string>> run_fields;  // what makes a resume the same run
    {  // a look at the first batch, not an epoch: the first epoch is the dataset's first pass (its shuffle)
      const auto counters = ds.pass_counters();
      auto it = ds.iterator();
      auto first = data_pass(it, detail::per_worker(data), ds.cardinality(), Phase::Train);
      first.next_fn = [inner = std::move(first.next_fn), &global_batch]() {
        auto b = inner();
        if (b && b->x && !global_batch) global_batch = b->x->shape()[0];
        return b;
      };
      if (!ex_->begin_fit(first)) return {};  // this process served the ones training
      if (backup_of && !global_batch && !first.next() && !built()) first.empty();  // a checkpoint loads into a built model
      if (backup_of) run_fields = run_fingerprint(*m_, global_batch, first);  // whatever the strategy
      ds.set_pass_counters(counters);
    }
    History history;
    detail::ModelAccessOf<Model> access(*this);
    access.speak_to(opts.verbose == Verbosity::Silent ? nullptr : opts.out);  // Callback::say
    detail::CallbacksSeeModel seen(opts.callbacks, access);  // their model() during this fit
    std::optional<detail::FitBackup<Model>> backup;
    if (backup_of) backup.emplace(*this, *backup_of, std::move(run_fields), opts.epochs, opts.callbacks, access);
    try {
      const detail::FitResume* resume = backup ? &backup->resume() : nullptr;
      history = detail::fit_epochs(
          *ex_, ds, opts,
          [&](auto& it) { return data_pass(it, detail::per_worker(data), ds.cardinality(), Phase::Train); },
          [this](const PassTotals& t) { return logs_of(t); },
          [&](Logs& logs) {
            if (validation) {
              const Logs val = evaluate(*validation);
              for (const auto& [k, v] : val.items()) logs.set("val_" + k, v);
            }
            detail::agree_on_chiefs(*strategy_, is_chief(), logs);  // callbacks decide from the chief's
          },
          resume);
    } catch (...) {
      ex_->end_fit();
      throw;
    }
    ex_->end_fit();
    if (backup) backup->finished();
    return history;
  }

  //! Only the chief prints.
  [[nodiscard]] Verbosity speaker(Verbosity v) const noexcept { return ex_->is_chief() ? v : Verbosity::Silent; }

  Logs logs_of(const PassTotals& t) const {
    Logs l;
    const double n = t.local ? static_cast<double>(t.local) : 1.0;
    // the values (a read from a GPU's memory) only for a regularized model's L2 term
    l.set("loss", t.loss / n + (built() && m_->regularized() ? m_->regularization_loss(ex_->value()) : 0.0));
    for (std::size_t k = 0; k < m_->metrics.size(); ++k) l.set(m_->metrics[k]->name(), t.metrics[k] / n);
    return l;
  }

  void check_compiled(const char* what) const {
    if (!m_->optimizer || !m_->loss)
      throw Error(kind_ + "::" + what + ": compile the model first (optimizer and loss)");
  }
  void check_built(const char* what) const {
    if (!built()) throw Error(kind_ + "::" + what + ": the model is not built yet");
  }

  AnyStrategy* strategy_;

 protected:
  std::unique_ptr<detail::LayerProgram> m_;  // on the heap: the executor keeps a reference across moves
  std::unique_ptr<Executor> ex_;
  std::optional<Shape> input_;
  std::string kind_;  // "Sequential" or "Model", in messages

 private:
  std::int64_t iterations_ = 0;
  std::size_t steps_per_execution_ = 1;  // compile's (CompileOptions::steps_per_execution)
  detail::BatchFeed feed_;  // the batches as floats, the labels' shape
  detail::CustomLoopState loop_;  // train_step's sums since reset_metrics
};

}  // namespace strata::nn
