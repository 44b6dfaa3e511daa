#pragma once
//! Callbacks: hooks fit calls at the start/end of training, of each epoch and
//! of each batch (on the caller's thread, between steps). Derive from
//! Callback, or pass lambdas to LambdaCallback. A callback stops training by
//! setting its own `stop_training` (fit clears it when it starts). During
//! fit, model() is the model it trains (nn/program/model_access.hpp). The Keras
//! callbacks (EarlyStopping, ModelCheckpoint, ...) are in nn/callbacks/keras_callbacks.hpp.
//!   strata::nn::LambdaCallback cb; cb.on_epoch_end_fn = [](int e, const strata::nn::Logs& l) { ... };
//!   model.fit(data, {.epochs = 5, .callbacks = {&cb}});

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/callbacks/logs.hpp>
#include <strata/nn/program/model_access.hpp>

namespace strata::nn {

//! A callback's state as named strings (what a checkpoint keeps for it).
using CallbackState = std::vector<std::pair<std::string, std::string>>;

class Callback;
namespace detail {
void set_batches_ended(Callback& c, std::size_t n) noexcept;
}

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin() {}
  virtual void on_train_end(const Logs&) {}
  virtual void on_epoch_begin(int /*epoch*/) {}
  //! `logs`: the epoch's training values (and val_* ones when validating);
  //! under several workers the chief's, on every worker.
  virtual void on_epoch_end(int /*epoch*/, const Logs& /*logs*/) {}
  virtual void on_batch_begin(int /*batch*/) {}
  //! `logs`: running means over the epoch so far (this worker's). With
  //! CompileOptions::steps_per_execution N, once per execution: `batch` its
  //! last batch, batches_ended() its batches (N, fewer at an epoch's end).
  virtual void on_batch_end(int /*batch*/, const Logs& /*logs*/) {}
  //! The batches the current on_batch_end ends (since the last one): 1
  //! unless steps run N to an execution. What a callback that counts
  //! batches adds.
  [[nodiscard]] std::size_t batches_ended() const noexcept { return batches_ended_; }
  //! Set to true (e.g. in on_epoch_end) to end fit after the current batch.
  bool stop_training = false;

  //! fit sets the model before on_train_begin (nullptr after fit).
  virtual void set_model(ModelAccess* m) { model_ = m; }
  //! What a BackupAndRestore checkpoint keeps of this callback (on the
  //! chief, when it saves), and gives back to a resumed run after
  //! on_train_begin (on every worker), before the first step. Callbacks
  //! without state keep none. A resumed run calls load_state on every
  //! callback: with an empty state when the checkpoint kept none for it (it
  //! was not in the run that saved, or kept nothing); an Error thrown there
  //! refuses the resume before any step, the checkpoints and logs untouched.
  [[nodiscard]] virtual CallbackState save_state() const { return {}; }
  virtual void load_state(const CallbackState& /*state*/) {}
  //! What this callback is, for its state in a checkpoint: its kind and,
  //! where it writes one, its file ("CSVLogger(history.csv)"). A resumed
  //! run hands each callback the state saved under its own id, whatever its
  //! place in the list. Empty (the default): its type's name. Two callbacks
  //! with one id are told apart by their order among those with that id.
  [[nodiscard]] virtual std::string state_id() const { return {}; }

 protected:
  //! The model fit trains; an Error outside fit.
  [[nodiscard]] ModelAccess& model() const {
    if (!model_) throw Error("Callback: no model: a callback reaches its model only while fit runs it");
    return *model_;
  }
  //! Prints `line` where fit prints its progress (ModelAccess::say): on the
  //! chief, unless fit is silent; nothing outside fit.
  void say(const std::string& line) const {
    if (model_) model_->say(line);
  }

 private:
  friend void detail::set_batches_ended(Callback& c, std::size_t n) noexcept;
  ModelAccess* model_ = nullptr;
  std::size_t batches_ended_ = 1;
};

namespace detail {
//! What fit tells each callback before on_batch_end (Callback::batches_ended).
inline void set_batches_ended(Callback& c, std::size_t n) noexcept { c.batches_ended_ = n; }
}  // namespace detail

struct LambdaCallback final : Callback {
  std::function<void()> on_train_begin_fn;
  std::function<void(const Logs&)> on_train_end_fn;
  std::function<void(int)> on_epoch_begin_fn;
  std::function<void(int, const Logs&)> on_epoch_end_fn;
  std::function<void(int)> on_batch_begin_fn;
  std::function<void(int, const Logs&)> on_batch_end_fn;

  void on_train_begin() override { if (on_train_begin_fn) on_train_begin_fn(); }
  void on_train_end(const Logs& l) override { if (on_train_end_fn) on_train_end_fn(l); }
  void on_epoch_begin(int e) override { if (on_epoch_begin_fn) on_epoch_begin_fn(e); }
  void on_epoch_end(int e, const Logs& l) override { if (on_epoch_end_fn) on_epoch_end_fn(e, l); }
  void on_batch_begin(int b) override { if (on_batch_begin_fn) on_batch_begin_fn(b); }
  void on_batch_end(int b, const Logs& l) override { if (on_batch_end_fn) on_batch_end_fn(b, l); }
};

}  // namespace strata::nn
