#pragma once
//! EarlyStopping (as Keras'): stops fit when the monitored value has not
//! improved by more than min_delta for `patience` epochs; with
//! restore_best_weights the model ends with the weights of its best epoch;
//! with a baseline, epochs that do not beat it count as no improvement.
//! Under several workers every worker decides from the chief's logs (fit
//! gives them to all), so all stop at the same epoch. Under BackupAndRestore
//! a resumed run goes on with the counter, best value and best weights.
//!   strata::nn::EarlyStopping stop{{.monitor = "val_loss", .patience = 3, .restore_best_weights = true}};
//!   model.fit(train, {.epochs = 100, .callbacks = {&stop}}, test);   stop.stopped_epoch();

#include <optional>
#include <string>
#include <vector>

#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/callbacks/monitor.hpp>

namespace strata::nn {

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;  //!< an improvement is a change by more than this
  int patience = 0;        //!< epochs without improvement before stopping
  Mode mode = Mode::Auto;
  std::optional<double> baseline = std::nullopt;  //!< the value to beat (an epoch that does not counts as no improvement)
  bool restore_best_weights = false;  //!< end with the best epoch's weights
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions o = {})
      : o_(std::move(o)), m_(o_.monitor, o_.mode, o_.min_delta, "EarlyStopping") {
    if (o_.patience < 0) throw Error("EarlyStopping: patience must be >= 0");
  }

  //! The value it watches (EarlyStoppingOptions::monitor).
  [[nodiscard]] const std::string& monitor() const noexcept { return o_.monitor; }
  [[nodiscard]] std::string state_id() const override { return "EarlyStopping(" + o_.monitor + ")"; }
  //! The epoch (0-based) at which it stopped fit; -1 when it did not.
  [[nodiscard]] int stopped_epoch() const noexcept { return stopped_epoch_; }
  //! The best epoch (0-based; -1 before any) and its value.
  [[nodiscard]] int best_epoch() const noexcept { return best_epoch_; }
  [[nodiscard]] std::optional<double> best() const noexcept { return best_; }
  //! Epochs since the last improvement.
  [[nodiscard]] int wait() const noexcept { return wait_; }

  void on_train_begin() override {
    wait_ = 0;
    stopped_epoch_ = best_epoch_ = -1;
    best_.reset();
    best_weights_.clear();
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    const double current = m_.value(logs, "EarlyStopping");
    if (o_.restore_best_weights && best_weights_.empty()) best_weights_ = model().get_weights();
    ++wait_;
    if (m_.improved(current, best_)) {
      best_ = current;
      best_epoch_ = epoch;
      if (o_.restore_best_weights) best_weights_ = model().get_weights();
      if (!o_.baseline || m_.improved(current, o_.baseline)) wait_ = 0;
      return;
    }
    if (wait_ >= o_.patience && epoch > 0) {
      stopped_epoch_ = epoch;
      stop_training = true;
      say("Epoch " + std::to_string(epoch + 1) + ": early stopping (" + o_.monitor + " has not improved for " +
          std::to_string(wait_) + " epoch(s))");
    }
  }
  void on_train_end(const Logs& /*logs*/) override {
    if (o_.restore_best_weights && !best_weights_.empty()) {
      model().set_weights(best_weights_);
      if (best_epoch_ >= 0) say("Restoring model weights from the end of the best epoch: " + std::to_string(best_epoch_ + 1) + ".");
    }
  }

  [[nodiscard]] CallbackState save_state() const override {
    CallbackState s{{"wait", std::to_string(wait_)}, {"best_epoch", std::to_string(best_epoch_)}};
    if (best_) s.emplace_back("best", detail::exact(*best_));
    if (!best_weights_.empty()) s.emplace_back("best_weights", detail::hex_floats(best_weights_));
    return s;
  }
  void load_state(const CallbackState& s) override {
    if (const auto* w = detail::find_state(s, "wait")) wait_ = std::stoi(*w);
    if (const auto* b = detail::find_state(s, "best_epoch")) best_epoch_ = std::stoi(*b);
    best_ = detail::optional_state(s, "best");
    best_weights_.clear();
    if (const auto* hex = detail::find_state(s, "best_weights")) {
      best_weights_ = model().get_weights();
      if (!detail::unhex_floats(*hex, best_weights_))
        throw Error("EarlyStopping: the checkpoint's best weights do not fit this model");
    }
  }

 private:
  EarlyStoppingOptions o_;
  detail::Monitor m_;
  int wait_ = 0;
  int stopped_epoch_ = -1;
  int best_epoch_ = -1;
  std::optional<double> best_;
  std::vector<io::NamedTensor> best_weights_;
};

}  // namespace strata::nn
