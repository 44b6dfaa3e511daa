#pragma once
//! Callbacks: hooks fit calls at the start/end of training, of each epoch and
//! of each batch (on the caller's thread, between steps). Derive from
//! Callback, or pass lambdas to LambdaCallback. A callback stops training by
//! setting its own `stop_training` (fit clears it when it starts).
//!   strata::nn::LambdaCallback cb; cb.on_epoch_end_fn = [](int e, const strata::nn::Logs& l) { ... };
//!   model.fit(data, {.epochs = 5, .callbacks = {&cb}});

#include <functional>

#include <strata/nn/logs.hpp>

namespace strata::nn {

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin() {}
  virtual void on_train_end(const Logs&) {}
  virtual void on_epoch_begin(int /*epoch*/) {}
  //! `logs`: the epoch's training values (and val_* ones when validating).
  virtual void on_epoch_end(int /*epoch*/, const Logs& /*logs*/) {}
  virtual void on_batch_begin(int /*batch*/) {}
  //! `logs`: running means over the epoch so far.
  virtual void on_batch_end(int /*batch*/, const Logs& /*logs*/) {}
  //! Set to true (e.g. in on_epoch_end) to end fit after the current batch.
  bool stop_training = false;
};

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
