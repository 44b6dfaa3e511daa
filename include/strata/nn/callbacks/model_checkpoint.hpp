#pragma once
//! ModelCheckpoint (as Keras'): saves the model after each epoch, or with
//! save_freq = N every N batches (counted across epochs), to a path made
//! from a pattern: "{epoch}", with save_freq "{batch}" and "{step}", and
//! any log value by name, each with an optional printf-style format
//! ("{epoch:02d}", "{val_loss:.3f}"); with save_best_only only improving
//! saves. Weights (save_weights), or with weights_only = false a checkpoint
//! (weights, optimizer state, step). The chief alone writes, deciding from
//! its own logs, and every worker learns whether it could; a resumed run
//! (BackupAndRestore) goes on with the best value and the batch count.
//! Every option, and what a save holds under a parameter server: docs/training.md.
//!   strata::nn::ModelCheckpoint ckpt{"ckpt-{epoch:02d}-{val_loss:.3f}.weights", {.save_best_only = true}};
//!   strata::nn::ModelCheckpoint often{"ckpt-{step:06d}.weights", {.save_freq = 500}};
//!   model.fit(train, {.epochs = 10, .callbacks = {&ckpt, &often}}, test);   ckpt.last_saved();

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>

#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/callbacks/monitor.hpp>

namespace strata::nn {

struct ModelCheckpointOptions {
  std::string monitor = "val_loss";  //!< what save_best_only compares
  Mode mode = Mode::Auto;
  bool save_best_only = false;
  bool weights_only = true;  //!< save_weights; false: save_checkpoint
  //! 0: save at each epoch's end (Keras' "epoch"); N > 0: after every N-th
  //! batch, counted across epochs, and not at epoch ends (Keras' integer).
  std::int64_t save_freq = 0;
};

class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(std::string filepath, ModelCheckpointOptions o = {})
      : pattern_(std::move(filepath)), o_(std::move(o)), m_(o_.monitor, o_.mode, 0.0, "ModelCheckpoint") {
    if (pattern_.empty()) throw Error("ModelCheckpoint: the file path is empty");
    if (o_.save_freq < 0)
      throw Error("ModelCheckpoint: save_freq must be 0 (each epoch's end) or a number of batches, got " +
                  std::to_string(o_.save_freq));
    if (o_.save_freq && o_.save_best_only && o_.monitor.starts_with("val_"))
      throw Error("ModelCheckpoint: save_best_only with save_freq " + std::to_string(o_.save_freq) + " compares \"" +
                  o_.monitor + "\" after batches, whose logs have no val_* values (validation runs at epoch ends): "
                  "monitor a training value (\"loss\", a metric) or save at epoch ends (save_freq 0)");
    Logs probe;  // the pattern's syntax, checked now rather than after the first epoch
    (void)format_path({}, probe, true);
  }

  //! Where a save happens: the epoch (0-based), and with save_freq the batch
  //! of that epoch (0-based) and the optimizer steps taken so far.
  struct At {
    int epoch = 0;
    int batch = -1;  //!< -1: at the epoch's end
    std::int64_t step = 0;
  };
  //! The path `pattern` names for `epoch` (0-based) and `logs`.
  [[nodiscard]] std::filesystem::path path_for(int epoch, const Logs& logs) const {
    return format_path({.epoch = epoch}, logs, false);
  }
  //! The path `pattern` names at `at` (a save every save_freq batches) for `logs`.
  [[nodiscard]] std::filesystem::path path_for(const At& at, const Logs& logs) const {
    return format_path(at, logs, false);
  }
  //! The last file saved (empty before any, and on other workers than the chief).
  [[nodiscard]] const std::filesystem::path& last_saved() const noexcept { return last_; }
  [[nodiscard]] std::optional<double> best() const noexcept { return best_; }

  [[nodiscard]] std::string state_id() const override { return "ModelCheckpoint(" + pattern_ + ")"; }
  void on_train_begin() override {
    best_.reset();
    since_save_ = 0;
  }
  void on_epoch_begin(int epoch) override { epoch_ = epoch; }
  void on_batch_end(int batch, const Logs& logs) override {
    // batches, not calls: with steps_per_execution one call ends several (a save as soon as save_freq are reached)
    if (!o_.save_freq || (since_save_ += static_cast<std::int64_t>(batches_ended())) < o_.save_freq) return;
    since_save_ = 0;
    // the batch's logs are each worker's own: the chief's decide (every worker reaches this batch)
    if (o_.save_best_only) {
      const double current = model().from_chief({m_.value(logs, "ModelCheckpoint")})[0];
      if (!m_.improved(current, best_)) return;
      best_ = current;
    }
    save(path_for(At{epoch_, batch, model().iterations()}, logs));
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    if (o_.save_freq) return;
    if (o_.save_best_only) {
      const double current = m_.value(logs, "ModelCheckpoint");
      if (!m_.improved(current, best_)) return;
      best_ = current;
    }
    save(path_for(epoch, logs));
  }

  [[nodiscard]] CallbackState save_state() const override {
    CallbackState s{{"since_save", std::to_string(since_save_)}};
    if (best_) s.emplace_back("best", detail::exact(*best_));
    return s;
  }
  void load_state(const CallbackState& s) override {
    best_ = detail::optional_state(s, "best");
    if (const auto* n = detail::find_state(s, "since_save")) since_save_ = std::stoll(*n);
  }

 private:
  //! Writes `path` on the chief; every worker learns whether it could (collective).
  void save(const std::filesystem::path& path) {
    std::string why;
    const bool chief = model().is_chief();
    if (chief || model().state_reads_collective()) {  // sharded state: every worker joins it, the chief writes
      try {
        if (chief && path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
        if (o_.weights_only) model().save_weights(path);
        else model().save_checkpoint(path);
        if (chief) last_ = path;
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    const bool failed = model().any_worker(!why.empty());
    if (!why.empty()) throw Error("ModelCheckpoint: " + why);
    if (failed) throw Error("ModelCheckpoint: the chief could not write " + path.string());
  }

  //! Replaces each {name[:format]}; `check`: the syntax only (names not looked up).
  [[nodiscard]] std::string format_path(const At& at, const Logs& logs, bool check) const {
    std::string out;
    for (std::size_t i = 0; i < pattern_.size(); ++i) {
      if (pattern_[i] != '{') {
        out += pattern_[i];
        continue;
      }
      const auto close = pattern_.find('}', i);
      if (close == std::string::npos) throw Error("ModelCheckpoint: \"" + pattern_ + "\" has a { without its }");
      const std::string field = pattern_.substr(i + 1, close - i - 1);
      const auto colon = field.find(':');
      const std::string name = field.substr(0, colon);
      std::string spec = colon == std::string::npos ? std::string() : field.substr(colon + 1);
      // {epoch}, {batch}, {step}: counts (1-based but the step), formatted as integers or values
      const bool is_count = name == "epoch" || name == "batch" || name == "step";
      if (name != "epoch" && is_count && !o_.save_freq)
        throw Error("ModelCheckpoint: \"" + pattern_ + "\" names {" + name + "}, which only a save every save_freq "
                    "batches has (this one saves at epoch ends: save_freq 0)");
      if (spec.empty()) spec = is_count ? "d" : "g";
      // flags, width, precision, then one conversion: d for the epoch, f, e or g for any value
      std::size_t k = 0;
      while (k < spec.size() && (std::isdigit(static_cast<unsigned char>(spec[k])) || std::string("-+ #.").find(spec[k]) != std::string::npos)) ++k;
      const char conv = k + 1 == spec.size() ? spec[k] : '\0';
      const bool ok = is_count ? std::string("dfeg").find(conv) != std::string::npos && conv
                               : std::string("feg").find(conv) != std::string::npos && conv;
      if (name.empty() || !ok)
        throw Error("ModelCheckpoint: \"{" + field + "}\" in \"" + pattern_ +
                    "\" is not {name} or {name:format} (a format as 02d for the epoch, batch or step, .3f, .2e or "
                    "g for a value)");
      if (!check) {
        char buf[128];
        const long long count = name == "epoch" ? at.epoch + 1LL : name == "batch" ? at.batch + 1LL : at.step;
        if (is_count && conv == 'd') std::snprintf(buf, sizeof buf, ("%" + spec.substr(0, k) + "lld").c_str(), count);
        else if (is_count) std::snprintf(buf, sizeof buf, ("%" + spec).c_str(), static_cast<double>(count));
        else if (!logs.contains(name))
          throw Error("ModelCheckpoint: \"" + pattern_ + "\" names \"" + name + "\", which the " +
                      std::string(o_.save_freq ? "batch's" : "epoch's") + " logs lack (" +
                      (logs.items().empty() ? std::string("none") : "they have " + names_of(logs)) + ")");
        else std::snprintf(buf, sizeof buf, ("%" + spec).c_str(), logs.at(name));
        out += buf;
      }
      i = close;
    }
    return out;
  }
  [[nodiscard]] std::string names_of(const Logs& logs) const {
    std::string s = o_.save_freq ? "epoch, batch, step" : "epoch";
    for (const auto& kv : logs.items()) s += ", " + kv.first;
    return s;
  }

  std::string pattern_;
  ModelCheckpointOptions o_;
  detail::Monitor m_;
  std::optional<double> best_;
  std::filesystem::path last_;
  int epoch_ = 0;              // the epoch running (for {epoch} in a save within it)
  std::int64_t since_save_ = 0;  // batches since the last save_freq save (or fit's start)
};

}  // namespace strata::nn
