#pragma once
//! The callbacks that change the learning rate at run time, as Keras':
//! ReduceLROnPlateau (the rate times `factor` after `patience` epochs
//! without improvement, then `cooldown` epochs of rest, never below min_lr)
//! and LearningRateScheduler (the rate of each epoch from a function of
//! the epoch and the current rate). The new rate reaches every copy of the
//! optimizer (nn/optimizers/learning_rate.hpp) from the next step on, replacing a
//! schedule; under parameter servers in other processes it cannot (their
//! optimizers are theirs), and setting it raises an Error. Decisions come
//! from the chief's logs on every worker. Under BackupAndRestore a resumed
//! run restores the rate and their counters.
//!   strata::nn::ReduceLROnPlateau plateau{{.monitor = "val_loss", .factor = 0.5, .patience = 2}};
//!   strata::nn::LearningRateScheduler sched{[](int epoch, float lr) { return epoch < 3 ? lr : lr * 0.9f; }};
//!   model.fit(train, {.epochs = 20, .callbacks = {&plateau, &sched}}, test);

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/optimizers/learning_rate.hpp>
#include <strata/nn/callbacks/monitor.hpp>

namespace strata::nn {

struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  double factor = 0.1;       //!< new rate = rate * factor (in (0, 1))
  int patience = 10;         //!< epochs without improvement before reducing
  Mode mode = Mode::Auto;
  double min_delta = 1e-4;   //!< an improvement is a change by more than this
  int cooldown = 0;          //!< epochs after a reduction before counting again
  double min_lr = 0.0;       //!< the rate never goes below this
};

class ReduceLROnPlateau : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions o = {})
      : o_(std::move(o)), m_(o_.monitor, o_.mode, o_.min_delta, "ReduceLROnPlateau") {
    if (!(o_.factor > 0.0 && o_.factor < 1.0)) throw Error("ReduceLROnPlateau: factor must be in (0, 1)");
    if (o_.patience < 0 || o_.cooldown < 0) throw Error("ReduceLROnPlateau: patience and cooldown must be >= 0");
    if (!(o_.min_lr >= 0.0)) throw Error("ReduceLROnPlateau: min_lr must be >= 0");
  }
  //! Epochs without improvement so far; the best value; reductions made in the last fit.
  [[nodiscard]] int wait() const noexcept { return wait_; }
  [[nodiscard]] std::optional<double> best() const noexcept { return best_; }
  [[nodiscard]] std::string state_id() const override { return "ReduceLROnPlateau(" + o_.monitor + ")"; }

  void on_train_begin() override {
    wait_ = cooldown_ = 0;
    best_.reset();
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    const double current = m_.value(logs, "ReduceLROnPlateau");
    if (cooldown_ > 0) {
      --cooldown_;
      wait_ = 0;
    }
    if (m_.improved(current, best_)) {
      best_ = current;
      wait_ = 0;
      return;
    }
    if (cooldown_ > 0 || ++wait_ < o_.patience) return;
    const float old = model().learning_rate();
    if (old > static_cast<float>(o_.min_lr)) {
      const float rate = std::max(static_cast<float>(old * o_.factor), static_cast<float>(o_.min_lr));
      model().set_learning_rate(rate);
      say("Epoch " + std::to_string(epoch + 1) + ": ReduceLROnPlateau reducing learning rate to " +
          detail::rate_text(rate) + ".");
      cooldown_ = o_.cooldown;
      wait_ = 0;
    }
  }

  [[nodiscard]] CallbackState save_state() const override {
    CallbackState s{{"wait", std::to_string(wait_)}, {"cooldown", std::to_string(cooldown_)}};
    if (best_) s.emplace_back("best", detail::exact(*best_));
    return s;
  }
  void load_state(const CallbackState& s) override {
    if (const auto* w = detail::find_state(s, "wait")) wait_ = std::stoi(*w);
    if (const auto* c = detail::find_state(s, "cooldown")) cooldown_ = std::stoi(*c);
    best_ = detail::optional_state(s, "best");
  }

 private:
  ReduceLROnPlateauOptions o_;
  detail::Monitor m_;
  int wait_ = 0;
  int cooldown_ = 0;
  std::optional<double> best_;
};

class LearningRateScheduler : public Callback {
 public:
  //! `schedule(epoch, rate)`: the rate for `epoch` (0-based) from the current one.
  explicit LearningRateScheduler(std::function<float(int, float)> schedule) : fn_(std::move(schedule)) {
    if (!fn_) throw Error("LearningRateScheduler: no schedule function");
  }

  [[nodiscard]] std::string state_id() const override { return "LearningRateScheduler"; }
  void on_train_begin() override { applied_ = -1; }
  void on_epoch_begin(int epoch) override {
    if (epoch == applied_) return;  // a run resumed inside this epoch: its rate is set already
    // the chief's choice on every worker (a schedule that reads a clock or a file may differ)
    const float rate = static_cast<float>(model().from_chief({static_cast<double>(fn_(epoch, model().learning_rate()))})[0]);
    model().set_learning_rate(rate);
    applied_ = epoch;
  }

  [[nodiscard]] CallbackState save_state() const override { return {{"epoch", std::to_string(applied_)}}; }
  void load_state(const CallbackState& s) override {
    if (const auto* e = detail::find_state(s, "epoch")) applied_ = std::stoi(*e);
  }

 private:
  std::function<float(int, float)> fn_;
  int applied_ = -1;  // the epoch whose rate is set
};

}  // namespace strata::nn
