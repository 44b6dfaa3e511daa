#pragma once
//! The seam between a model and the strategy that trains it. The model
//! describes; the strategy executes.
//!
//! The model (strata/nn's Sequential) gives the strategy's executor a
//! ModelProgram: the flat parameter layout, per-replica programs (the layers
//! bound to one copy of the parameters and one gradient buffer, running
//! forward, loss and backward on rows of a batch), and the optimizer's
//! elementwise update. It hands batches and callbacks over as a Pass.
//!
//! The executor (in parallel/, picked by parallel/dispatch.hpp) decides
//! everything else: where the variables and optimizer state live, how a
//! global batch is split over replicas (and workers), how gradients are
//! reduced, where and how the update is applied, and how logs are summed.
//!   auto ex = strategy.any().make_executor(program);
//!   ex->place(init);  ex->run_pass(pass);  ex->value();

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/gradient/step_hooks.hpp>
#include <strata/device/tensor_group.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

//! What a pass over the data computes.
enum class Phase { Train, Evaluate, Predict };

//! One batch as the model hands it to an executor: features and labels as
//! float tensors with the same first extent (no labels when predicting),
//! and where predictions go (rows x output width, Predict only).
struct Batch {
  const Tensor<float>* x = nullptr;
  const Tensor<float>* y = nullptr;
  float* predictions = nullptr;
};

//! Where and what one replica computes in a step.
struct StepInfo {
  Phase phase = Phase::Train;
  int replica = 0;              //!< global replica id (keys dropout masks)
  int replicas = 1;             //!< replicas whose gradients are summed into one update (shares of L2)
  std::uint64_t iteration = 0;  //!< the optimizer's step (keys dropout masks)
  float scale = 1.f;            //!< each example's loss is multiplied by this (1 / global batch)
  //! A capturable step (ReplicaProgram::run_loaded): the counters in the
  //! replica's memory whose iteration keys dropout; the loss and metric
  //! sums accumulate there across steps (read by take_sums), and the
  //! gradient's non-finite values are counted into counters->bad.
  kernels::StepCounters* counters = nullptr;
  //! Training: told each range of the gradient that is final as backward
  //! produces it (null: nobody asks; a program may also never tell, the
  //! executor then treats the whole gradient as final after the step).
  GradientReady* ready = nullptr;
  //! Sharded parameters or gradients (ZeRO 2 and 3): where each layer's are,
  //! acquired before and released after each of its calls (null: the bound buffers).
  ParameterWindows* windows = nullptr;
  //! Tensor parallelism: the group of replicas this replica's split layers
  //! sum their partial results with (null: no layer is split).
  TensorGroup* tensor_group = nullptr;
};

//! The sums a replica's rows contribute to a pass's logs.
struct ReplicaResult {
  double loss = 0;              //!< sum of the per-example losses (unscaled)
  std::vector<double> metrics;  //!< each metric's sum over the rows
  std::size_t rows = 0;
  //! The gradient's NaN and infinite values, when the replica counted them
  //! (a device replica does, with its sums: no extra read-back).
  std::optional<double> nonfinite;
};

//! A model's layers bound to one replica's copy of the parameters and one
//! gradient buffer (made by ModelProgram::make_replica).
class ReplicaProgram {
 public:
  virtual ~ReplicaProgram() = default;
  //! Forward on rows `rows` of b.x; unless predicting, the loss and metrics
  //! against b.y into `out`; when training, the gradient of (scale x the
  //! rows' loss sum) plus this replica's 1/replicas share of the
  //! regularization gradient into the bound gradient buffer (overwritten).
  //! Predicting, rows' outputs go to b.predictions + rows.begin x width.
  virtual void step(const Batch& b, Range rows, const StepInfo& info, ReplicaResult& out) = 0;

  // A capturable training step (execution/device_executor.hpp's captured
  // steps): the rows copied in first, then a step that only computes (no
  // copy to or from the host, no allocation once warmed up at that size).
  //! Copies rows `rows` of b.x and b.y into the replica's input buffers.
  virtual void load(const Batch& /*b*/, Range /*rows*/) { throw no_capture(); }
  //! A training step on the loaded rows with info.counters set: sums stay in
  //! the replica's memory (the step's rows added to them), nothing read back.
  virtual void run_loaded(const StepInfo& /*info*/) { throw no_capture(); }
  //! The sums accumulated since the last take_sums (rows: `rows`), zeroed;
  //! throws if a label was not a class index.
  virtual void take_sums(std::size_t /*rows*/, ReplicaResult& /*out*/) { throw no_capture(); }
  //! Zeroes those sums (a captured pass's start).
  virtual void reset_sums() { throw no_capture(); }

 private:
  static Error no_capture() { return Error("this model program cannot run captured steps"); }
};

//! The optimizer's update of a contiguous slice of the parameters, with the
//! optimizer state (e.g. Adam's moments) of `n` elements it was made for.
class Updater {
 public:
  virtual ~Updater() = default;
  //! w -= f(g) elementwise; `offset`: where w starts within the state's n
  //! elements; `step`: updates before this one.
  virtual void apply(std::span<float> w, std::span<const float> g, std::size_t offset, std::int64_t step) = 0;
  //! The same inside a capturable step: the step size at the iteration in
  //! `d`'s counters read from its table, gated by the finiteness count.
  virtual void apply_at(std::span<float> /*w*/, std::span<const float> /*g*/, std::size_t /*offset*/,
                        const kernels::DeviceStep& /*d*/) {
    throw Error("this optimizer cannot run in a captured step");
  }
  //! The step size the table of a captured step holds for `step`.
  [[nodiscard]] virtual float step_rate(std::int64_t /*step*/) const {
    throw Error("this optimizer cannot run in a captured step");
  }
  //! Before captured steps of iterations `step` to `step + count - 1` (each
  //! time the executor fills its rate table): what apply_at reads besides
  //! the step size (AdamW's decay), written to the updater's memory.
  virtual void prepare_at(std::int64_t /*step*/, std::size_t /*count*/) {}
  //! Clipping by the global norm (nn::Optimizer::global_clipnorm): 0 when
  //! off, else c, and the executor scales each step's reduced gradient by
  //! min(1, c / ||g||), the norm over every parameter of the model, before apply.
  [[nodiscard]] virtual float global_clipnorm() const { return 0.f; }
  //! The optimizer state, slot by slot (e.g. Adam's m, then v), each the
  //! `n` elements the updater was made for, copied to the host.
  [[nodiscard]] virtual std::vector<Tensor<float>> state() { return {}; }
  //! Replaces the state with slots shaped as state() returns them.
  virtual void set_state(std::span<const Tensor<float>> slots) {
    if (!slots.empty()) throw Error("this optimizer keeps no state to set");
  }
};

//! What one pipeline stage computes for one micro-batch.
struct StageStep {
  Phase phase = Phase::Train;
  int micro = 0;                //!< the micro-batch's index in its batch (keys dropout masks as a replica id does)
  std::uint64_t iteration = 0;  //!< the optimizer's step (keys dropout masks)
  float scale = 1.f;            //!< each example's loss is multiplied by this (1 / batch)
};

//! A batch's last backward on a stage when its gradient is wanted as it
//! becomes final (the pipeline copies' gradient buckets): each layer's
//! parameter gradients are finished right after its backward (summed with
//! the earlier micro-batches', plus 1 / `copies` of the regularization
//! gradient: finish_gradient's share, not added again after) and told to
//! `ready` (offsets in the stage's slice, from its end down to 0).
struct LastBackward {
  GradientReady* ready = nullptr;
  int copies = 1;
};

//! A contiguous range of a model's layers bound to their slice of the
//! parameters and of the gradient (made by ModelProgram::make_stage), with
//! the activations of `slots()` micro-batches kept between a forward and
//! its backward (parallel/pipeline/pipeline_executor.hpp drives it). On its
//! compute (ModelProgram::make_stage_on): `in` and `dout` are host memory,
//! which the stage uploads; the spans it returns are in its compute's memory.
class StageProgram {
 public:
  virtual ~StageProgram() = default;
  //! Elements of one sample's input and output activations.
  [[nodiscard]] virtual std::size_t input_width() const = 0;
  [[nodiscard]] virtual std::size_t output_width() const = 0;
  //! Whether backward runs here (a layer with parameters is here or before),
  //! and whether it yields the gradient of the input (one is before).
  [[nodiscard]] virtual bool has_backward() const = 0;
  [[nodiscard]] virtual bool has_input_gradient() const = 0;
  //! Keeps the activations of `n` micro-batches (slots 0 .. n-1).
  virtual void set_slots(std::size_t n) = 0;
  //! Forward of `rows` samples `in` (rows x input_width) into `slot`; the
  //! output (rows x output_width) stays there until the slot's next forward.
  virtual std::span<const float> forward(std::size_t slot, const float* in, std::size_t rows, const StageStep& s) = 0;
  //! The last stage, after forward: loss and metric sums against labels
  //! `y` rows `rows` into `out`; training, the gradient of (scale x the
  //! loss sum) with respect to the output is kept in the slot.
  virtual void loss(std::size_t slot, const Tensor<float>& y, Range rows, const StageStep& s, ReplicaResult& out) = 0;
  //! Backward of the slot's micro-batch from `dout` (its output's gradient;
  //! null on the last stage: the kept one): parameter gradients written
  //! (`first`) or added into the bound gradient slice; returns the input's
  //! gradient (empty without has_input_gradient()). With `last` (the
  //! batch's last backward here), each layer's parameter gradients are
  //! finished as it ends them (LastBackward): the bits of backward, then
  //! finish_gradient.
  virtual std::span<const float> backward(std::size_t slot, const float* dout, bool first,
                                          const LastBackward* last) = 0;
  //! After a step's last backward (unless it was given a LastBackward):
  //! adds 1 / `copies` of the regularization gradient (each of the
  //! pipeline's `copies` data-parallel copies adds its share, as replicas
  //! do, so that their sum adds it once).
  virtual void finish_gradient(int copies) = 0;
  //! Bytes of activations (and the output gradient kept) the slot holds now.
  [[nodiscard]] virtual std::size_t activation_bytes(std::size_t slot) const = 0;
};

//! What a model gives an executor.
class ModelProgram {
 public:
  virtual ~ModelProgram() = default;
  //! Parameters, flat: every variable end to end.
  [[nodiscard]] virtual std::size_t num_params() const = 0;
  //! The variables' shapes in that order (partitioners shard by them).
  [[nodiscard]] virtual std::vector<Shape> variable_shapes() const = 0;
  //! Elements of one prediction row.
  [[nodiscard]] virtual std::size_t output_width() const = 0;
  [[nodiscard]] virtual std::size_t num_metrics() const = 0;
  //! A replica bound to `value` (read) and `grad` (written), num_params() each
  //! (both empty: its layers are bound per call through StepInfo::windows;
  //! `grad` alone empty: the values bound, the gradients through the windows).
  [[nodiscard]] virtual std::unique_ptr<ReplicaProgram> make_replica(std::span<const float> value,
                                                                      std::span<float> grad) = 0;
  //! A replica running on `c` (a GPU's compute: `value` and `grad` in its
  //! memory). A program that only runs on the host keeps this default.
  [[nodiscard]] virtual std::unique_ptr<ReplicaProgram> make_replica_on(kernels::Compute& c, std::span<const float> value,
                                                                         std::span<float> grad) {
    if (c.where() != kernels::Where::Host)
      throw Error("this model program runs on the host only; it cannot make a replica on " + c.name());
    return make_replica(value, grad);
  }
  //! Whether the optimizer is known yet (the model was compiled).
  [[nodiscard]] virtual bool compiled() const = 0;
  //! The optimizer with fresh state for `n` elements (once compiled).
  [[nodiscard]] virtual std::unique_ptr<Updater> make_updater(std::size_t n) const = 0;
  //! What the processes of one run must agree on, as (name, value) fields
  //! (a run fingerprint, compared across workers at fit's start): by default
  //! the layout; a model adds its optimizer and seed.
  //!   for (auto& [name, value] : program.describe_for_fingerprint()) std::puts((name + "=" + value).c_str());
  [[nodiscard]] virtual std::vector<std::pair<std::string, std::string>> describe_for_fingerprint() const {
    std::string shapes;
    for (const Shape& s : variable_shapes()) shapes += s.str();
    return {{"parameter count", std::to_string(num_params())}, {"variable shapes", shapes}};
  }
  //! Pipeline stages (model parallelism, parallel/pipeline/pipeline_executor.hpp): a
  //! model made of layers in sequence lets an executor split them. The
  //! layers, each one's parameter count (its parameters are contiguous, in
  //! layer order) and output elements per sample, the input's elements per
  //! sample, and the stage of layers `layers` bound to `value` and `grad`
  //! (that stage's slice of the parameters: its layers' counts summed).
  //! A program that cannot be split keeps these defaults, which throw.
  [[nodiscard]] virtual std::size_t num_layers() const { throw no_stages(); }
  [[nodiscard]] virtual std::vector<std::size_t> layer_param_counts() const { throw no_stages(); }
  [[nodiscard]] virtual std::vector<std::size_t> layer_output_widths() const { throw no_stages(); }
  [[nodiscard]] virtual std::size_t input_width() const { throw no_stages(); }
  //! Whether a stage may start at layer k (a functional model: where one
  //! activation alone crosses; every k of a chain).
  [[nodiscard]] virtual bool cut_before(std::size_t /*k*/) const { return true; }
  //! cut_before(k) for k in [0, num_layers()] (0 and num_layers() always allowed).
  [[nodiscard]] std::vector<char> cuts() const {
    const std::size_t L = num_layers();
    std::vector<char> c(L + 1, 1);
    for (std::size_t k = 1; k < L; ++k) c[k] = cut_before(k) ? 1 : 0;
    return c;
  }
  [[nodiscard]] virtual std::unique_ptr<StageProgram> make_stage(Range /*layers*/, std::span<const float> /*value*/,
                                                                 std::span<float> /*grad*/) {
    throw no_stages();
  }
  //! The stage running on `c` (a GPU's compute: `value`, `grad` and the
  //! activations in its memory). A program whose stages run on the host only keeps this default.
  [[nodiscard]] virtual std::unique_ptr<StageProgram> make_stage_on(kernels::Compute& c, Range layers,
                                                                    std::span<const float> value,
                                                                    std::span<float> grad) {
    if (c.where() != kernels::Where::Host)
      throw Error("this model program runs pipeline stages on the host only; it cannot make a stage on " + c.name());
    return make_stage(layers, value, grad);
  }
  [[nodiscard]] static Error no_stages() {
    return Error("this model program cannot be split into pipeline stages (it describes no layers in sequence); "
                 "train it under a data-parallel strategy");
  }
  //! Tensor parallelism (parallel/tensor/tensor_parallel_executor.hpp): the
  //! elements of the flat layout that member `rank` of a group of `size`
  //! holds, in the order of its own flat buffer (its attention heads' and
  //! its MLP matrices' shards, and the layers that are not split, whole).
  //! Throws a strata::Error saying why when the model cannot be split so
  //! (heads not divisible by `size`, say). By default: not splittable.
  //! With pipeline `stages` (layer ranges; empty: none), a pair of layers
  //! split together that a stage boundary would cut stays whole.
  [[nodiscard]] virtual std::vector<TensorSegment> tensor_layout(int /*rank*/, int /*size*/,
                                                                 std::span<const Range> /*stages*/ = {}) const {
    throw no_tensor_split();
  }
  //! Which of its layers a group of `size` splits, and how, in words (the summary's).
  [[nodiscard]] virtual std::string describe_tensor_split(int /*size*/, std::span<const Range> /*stages*/ = {}) const {
    throw no_tensor_split();
  }
  //! Pipeline stage `s` of `stages` as member `rank` of a tensor-parallel
  //! group of `size` (tensor parallelism with pipeline stages), on `c`
  //! (null: the host), bound to its shard `value` and `grad` (the elements
  //! of tensor_layout(rank, size, stages) in stage s's layers, in `c`'s
  //! memory); its split layers sum over `group`.
  [[nodiscard]] virtual std::unique_ptr<StageProgram> make_tensor_stage_on(
      kernels::Compute* /*c*/, std::span<const Range> /*stages*/, std::size_t /*s*/, int /*rank*/, int /*size*/,
      TensorGroup& /*group*/, std::span<const float> /*value*/, std::span<float> /*grad*/) {
    throw no_tensor_split();
  }
  //! Member `rank` of `size`'s replica on `c` (null: the host), bound to its
  //! shard `value` and `grad` (tensor_layout(rank, size)'s elements, in
  //! `c`'s memory); its steps need StepInfo::tensor_group.
  [[nodiscard]] virtual std::unique_ptr<ReplicaProgram> make_tensor_replica_on(kernels::Compute* /*c*/, int /*rank*/,
                                                                              int /*size*/,
                                                                              std::span<const float> /*value*/,
                                                                              std::span<float> /*grad*/) {
    throw no_tensor_split();
  }
  [[nodiscard]] static Error no_tensor_split() {
    return Error("this model program cannot be split by tensor parallelism (it describes no layers to split); "
                 "train it under a data-parallel strategy");
  }
  //! The optimizer with fresh state for `n` elements in `c`'s space, updating there.
  [[nodiscard]] virtual std::unique_ptr<Updater> make_updater_on(kernels::Compute& c, std::size_t n) const {
    if (c.where() != kernels::Where::Host)
      throw Error("this model program updates on the host only; it cannot update on " + c.name());
    return make_updater(n);
  }
};

}  // namespace strata

#include <strata/execution/pass.hpp>  // ReplicaGradient, PassTotals, Pass, run_fingerprint
