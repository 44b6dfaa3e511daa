#pragma once
//! ModelCheckpoint (as Keras'): saves the model after each epoch to a path
//! made from a pattern: "{epoch}" (1-based, as Keras) and any value of the
//! epoch's logs by name, each with an optional printf-style format
//! ("{epoch:02d}", "{val_loss:.3f}"). With save_best_only only epochs whose
//! monitored value improved are saved. Saves the weights (save_weights) or,
//! with weights_only = false, a checkpoint (weights, optimizer state, step).
//! The chief alone writes; every worker learns whether it could. Under
//! BackupAndRestore a resumed run goes on with the best value.
//!   strata::nn::ModelCheckpoint ckpt{"ckpt-{epoch:02d}-{val_loss:.3f}.weights", {.save_best_only = true}};
//!   model.fit(train, {.epochs = 10, .callbacks = {&ckpt}}, test);   ckpt.last_saved();

#include <cctype>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>

#include <strata/nn/callbacks.hpp>
#include <strata/nn/monitor.hpp>

namespace strata::nn {

struct ModelCheckpointOptions {
  std::string monitor = "val_loss";  //!< what save_best_only compares
  Mode mode = Mode::Auto;
  bool save_best_only = false;
  bool weights_only = true;  //!< save_weights; false: save_checkpoint
};

class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(std::string filepath, ModelCheckpointOptions o = {})
      : pattern_(std::move(filepath)), o_(std::move(o)), m_(o_.monitor, o_.mode, 0.0, "ModelCheckpoint") {
    if (pattern_.empty()) throw Error("ModelCheckpoint: the file path is empty");
    Logs probe;  // the pattern's syntax, checked now rather than after the first epoch
    (void)format_path(0, probe, true);
  }

  //! The path `pattern` names for `epoch` (0-based) and `logs`.
  [[nodiscard]] std::filesystem::path path_for(int epoch, const Logs& logs) const {
    return format_path(epoch, logs, false);
  }
  //! The last file saved (empty before any, and on other workers than the chief).
  [[nodiscard]] const std::filesystem::path& last_saved() const noexcept { return last_; }
  [[nodiscard]] std::optional<double> best() const noexcept { return best_; }

  void on_train_begin() override { best_.reset(); }
  void on_epoch_end(int epoch, const Logs& logs) override {
    if (o_.save_best_only) {
      const double current = m_.value(logs, "ModelCheckpoint");
      if (!m_.improved(current, best_)) return;
      best_ = current;
    }
    const auto path = path_for(epoch, logs);
    std::string why;
    if (model().is_chief()) {
      try {
        if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
        if (o_.weights_only) model().save_weights(path);
        else model().save_checkpoint(path);
        last_ = path;
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    const bool failed = model().any_worker(!why.empty());
    if (!why.empty()) throw Error("ModelCheckpoint: " + why);
    if (failed) throw Error("ModelCheckpoint: the chief could not write " + path.string());
  }

  [[nodiscard]] CallbackState save_state() const override {
    CallbackState s;
    if (best_) s.emplace_back("best", detail::exact(*best_));
    return s;
  }
  void load_state(const CallbackState& s) override { best_ = detail::optional_state(s, "best"); }

 private:
  //! Replaces each {name[:format]}; `check`: the syntax only (names not looked up).
  [[nodiscard]] std::string format_path(int epoch, const Logs& logs, bool check) const {
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
      const bool is_epoch = name == "epoch";
      if (spec.empty()) spec = is_epoch ? "d" : "g";
      // flags, width, precision, then one conversion: d for the epoch, f, e or g for any value
      std::size_t k = 0;
      while (k < spec.size() && (std::isdigit(static_cast<unsigned char>(spec[k])) || std::string("-+ #.").find(spec[k]) != std::string::npos)) ++k;
      const char conv = k + 1 == spec.size() ? spec[k] : '\0';
      const bool ok = is_epoch ? std::string("dfeg").find(conv) != std::string::npos && conv
                               : std::string("feg").find(conv) != std::string::npos && conv;
      if (name.empty() || !ok)
        throw Error("ModelCheckpoint: \"{" + field + "}\" in \"" + pattern_ +
                    "\" is not {name} or {name:format} (a format as 02d for the epoch, .3f, .2e or g for a value)");
      if (!check) {
        char buf[128];
        const std::string fmt = "%" + spec;
        if (is_epoch && conv == 'd') std::snprintf(buf, sizeof buf, fmt.c_str(), epoch + 1);
        else if (is_epoch) std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<double>(epoch + 1));
        else if (!logs.contains(name))
          throw Error("ModelCheckpoint: \"" + pattern_ + "\" names \"" + name + "\", which the epoch's logs lack (" +
                      (logs.items().empty() ? std::string("none") : "they have " + names_of(logs)) + ")");
        else std::snprintf(buf, sizeof buf, fmt.c_str(), logs.at(name));
        out += buf;
      }
      i = close;
    }
    return out;
  }
  static std::string names_of(const Logs& logs) {
    std::string s = "epoch";
    for (const auto& kv : logs.items()) s += ", " + kv.first;
    return s;
  }

  std::string pattern_;
  ModelCheckpointOptions o_;
  detail::Monitor m_;
  std::optional<double> best_;
  std::filesystem::path last_;
};

}  // namespace strata::nn
