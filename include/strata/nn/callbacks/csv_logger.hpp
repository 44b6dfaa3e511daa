#pragma once
//! CSVLogger (as Keras'): one row per epoch, "epoch" (0-based, as Keras)
//! then the epoch's logs in name order, the columns fixed by the first row
//! written (a value missing later reads "NA"); a header first unless
//! appending to a file that has rows. Each row is flushed as written. The
//! chief alone writes. Under BackupAndRestore a resumed run appends to the
//! file as the checkpoint left it (rows written after it are dropped, then
//! written again by the resumed epochs), never rewriting it, so a run
//! stopped any number of times writes the rows of one never stopped; a
//! file missing or cut short is refused before the first step.
//!   strata::nn::CSVLogger csv{"history.csv", {.separator = ';', .append = false}};
//!   model.fit(train, {.epochs = 10, .callbacks = {&csv}}, test);

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/callbacks/monitor.hpp>

namespace strata::nn {

struct CSVLoggerOptions {
  char separator = ',';
  bool append = false;  //!< add to an existing file (else a fit starts it afresh)
};

class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::filesystem::path path, CSVLoggerOptions o = {}) : path_(std::move(path)), o_(o) {
    if (path_.empty()) throw Error("CSVLogger: the file path is empty");
    if (o_.separator == '\n' || o_.separator == '"' || o_.separator == '\0')
      throw Error("CSVLogger: the separator cannot be a newline, a quote or NUL");
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] std::string state_id() const override { return "CSVLogger(" + path_.string() + ")"; }

  void on_train_begin() override {  // the file is opened at the first row: a resumed run's state comes first
    file_.reset();
    keys_.clear();
    keep_ = false;
    written_ = 0;
    std::error_code ec;
    if (o_.append && model().is_chief() && std::filesystem::exists(path_, ec)) {  // rows before this fit stay
      written_ = std::filesystem::file_size(path_, ec);
      if (ec) throw Error("CSVLogger: cannot read the size of " + path_.string() + ": " + ec.message());
      keep_ = true;
    }
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    if (!model().is_chief()) return;
    if (!file_) open(logs);
    std::string row = std::to_string(epoch);
    for (const auto& k : keys_) row += o_.separator + (logs.contains(k) ? detail::exact_short(logs.at(k)) : "NA");
    write(row + "\n");
  }
  void on_train_end(const Logs& /*logs*/) override { file_.reset(); }

  //! The file's size as this run left it (also before its first row of a
  //! resumed fit: the size the checkpoint resumed from recorded) and its columns.
  [[nodiscard]] CallbackState save_state() const override {
    std::string keys;
    for (const auto& k : keys_) keys += k + '\n';
    return {{"bytes", std::to_string(written_)}, {"keys", keys}};
  }
  //! A resumed run: the file must hold at least the bytes the checkpoint
  //! recorded (rows after them, written by the run that was stopped, go
  //! when the next row is written); a logger the checkpoint kept nothing of
  //! starts its file at the resumed epoch, but never over an existing file
  //! (unless appending). Checked on the chief, before the first step.
  void load_state(const CallbackState& s) override {
    keys_.clear();
    const auto* b = detail::find_state(s, "bytes");
    const bool chief = model().is_chief();
    std::error_code ec;
    if (!b) {
      const bool exists = std::filesystem::exists(path_, ec);
      if (chief && exists && !o_.append && std::filesystem::file_size(path_, ec) > 0)
        throw Error("CSVLogger: the checkpoint this run resumes from kept no history for " + path_.string() +
                    " (the run that saved it did not log there), and the file exists: logging there now would "
                    "replace it. Move it away, log to another file, or start the run over (--start-over)");
      return;
    }
    written_ = std::stoull(*b);
    keep_ = written_ > 0;
    if (const auto* k = detail::find_state(s, "keys"))
      for (std::size_t at = 0, nl; (nl = k->find('\n', at)) != std::string::npos; at = nl + 1)
        keys_.push_back(k->substr(at, nl - at));
    if (!chief || !keep_) return;
    const bool exists = std::filesystem::exists(path_, ec);
    const auto size = exists ? std::filesystem::file_size(path_, ec) : 0;
    if (!exists || ec || size < written_)
      throw Error("CSVLogger: resuming, " + path_.string() + " should hold the " + std::to_string(written_) +
                  " bytes of history written before the checkpoint, but " +
                  (!exists ? std::string("it is missing (renamed or deleted?)")
                           : ec ? "it cannot be read (" + ec.message() + ")" : "it holds " + std::to_string(size)) +
                  ". Put the file back, or start the run over (--start-over)");
  }

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  void open(const Logs& logs) {
    std::error_code ec;
    if (keep_) {  // as this run knows it: rows after it (a stopped run's, written again now) go
      const auto size = std::filesystem::file_size(path_, ec);
      if (ec || size < written_)
        throw Error("CSVLogger: " + path_.string() + " should hold " + std::to_string(written_) +
                    " bytes of history, but " +
                    (ec ? "cannot be read (" + ec.message() + ")" : "holds " + std::to_string(size)));
      if (size > written_) std::filesystem::resize_file(path_, written_, ec);
      if (ec) throw Error("CSVLogger: cannot resize " + path_.string() + ": " + ec.message());
    }
    file_.reset(std::fopen(path_.string().c_str(), keep_ ? "ab" : "wb"));
    if (!file_) throw Error("CSVLogger: cannot open " + path_.string() + " for writing");
    if (!keep_) written_ = 0;
    if (keys_.empty()) {  // a fresh run's columns: the first row's names, sorted (as Keras)
      for (const auto& kv : logs.items()) keys_.push_back(kv.first);
      std::sort(keys_.begin(), keys_.end());
    }
    if (written_ == 0) {
      std::string header = "epoch";
      for (const auto& k : keys_) header += o_.separator + k;
      write(header + "\n");
    }
  }
  void write(const std::string& s) {
    if (std::fwrite(s.data(), 1, s.size(), file_.get()) != s.size() || std::fflush(file_.get()) != 0)
      throw Error("CSVLogger: cannot write " + path_.string());
    written_ += s.size();
  }

  std::filesystem::path path_;
  CSVLoggerOptions o_;
  std::unique_ptr<std::FILE, Close> file_;
  std::vector<std::string> keys_;
  bool keep_ = false;           // the file's first written_ bytes are history to keep (appending or resumed)
  std::uintmax_t written_ = 0;  // the file's size as this run knows it
};

}  // namespace strata::nn
