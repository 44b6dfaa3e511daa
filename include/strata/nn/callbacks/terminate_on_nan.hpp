#pragma once
//! TerminateOnNaN (as Keras'): stops fit after the batch whose loss is NaN
//! or infinite. Under several workers a worker's loss is its own running
//! value, so the workers agree after each batch (one small collective) and
//! all stop after the same batch when any of them saw one.
//!   strata::nn::TerminateOnNaN nan_stop;
//!   model.fit(train, {.epochs = 10, .callbacks = {&nan_stop}});   nan_stop.terminated_at();

#include <cmath>
#include <optional>
#include <utility>

#include <strata/nn/callbacks/callbacks.hpp>

namespace strata::nn {

class TerminateOnNaN : public Callback {
 public:
  //! (epoch, batch) of the batch that stopped the last fit, 0-based; nullopt when none did.
  [[nodiscard]] std::optional<std::pair<int, int>> terminated_at() const noexcept { return at_; }

  void on_train_begin() override { at_.reset(); }
  void on_epoch_begin(int epoch) override { epoch_ = epoch; }
  void on_batch_end(int batch, const Logs& logs) override {
    const bool bad = logs.contains("loss") && !std::isfinite(logs.at("loss"));
    if (!model().any_worker(bad)) return;
    at_.emplace(epoch_, batch);
    stop_training = true;
  }

 private:
  int epoch_ = 0;
  std::optional<std::pair<int, int>> at_;
};

}  // namespace strata::nn
