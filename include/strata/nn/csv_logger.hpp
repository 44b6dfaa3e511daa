#pragma once
//! CSVLogger (as Keras'): one row per epoch, "epoch" (0-based, as Keras)
//! then the epoch's logs in name order, the columns fixed by the first row
//! written (a value missing later reads "NA"); a header first unless
//! appending to a file that has rows. Each row is flushed as written. The
//! chief alone writes. Under BackupAndRestore a resumed run appends to the
//! file as the checkpoint left it (rows written after it are dropped, then
//! written again by the resumed epochs), never rewriting it.
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

#include <strata/nn/callbacks.hpp>
#include <strata/nn/monitor.hpp>

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

  void on_train_begin() override {  // the file is opened at the first row: a resumed run's state comes first
    file_.reset();
    keys_.clear();
    resume_size_.reset();
    written_ = 0;
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    if (!model().is_chief()) return;
    if (!file_) open(logs);
    std::string row = std::to_string(epoch);
    for (const auto& k : keys_) row += o_.separator + (logs.contains(k) ? detail::exact_short(logs.at(k)) : "NA");
    write(row + "\n");
  }
  void on_train_end(const Logs& /*logs*/) override { file_.reset(); }

  [[nodiscard]] CallbackState save_state() const override {
    std::string keys;
    for (const auto& k : keys_) keys += k + '\n';
    return {{"bytes", std::to_string(written_)}, {"keys", keys}};
  }
  void load_state(const CallbackState& s) override {
    // 0: the checkpoint came before the first row, the file not yet opened: it opens as a fresh run's
    if (const auto* b = detail::find_state(s, "bytes"); b && std::stoull(*b) > 0) resume_size_.emplace(std::stoull(*b));
    keys_.clear();
    if (const auto* k = detail::find_state(s, "keys"))
      for (std::size_t at = 0, nl; (nl = k->find('\n', at)) != std::string::npos; at = nl + 1)
        keys_.push_back(k->substr(at, nl - at));
  }

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  void open(const Logs& logs) {
    std::error_code ec;
    if (resume_size_) {  // as the checkpoint left it: rows after it go (the resumed epochs write them again)
      const auto size = std::filesystem::file_size(path_, ec);
      if (ec || size < *resume_size_)
        throw Error("CSVLogger: resuming, " + path_.string() + " should hold " + std::to_string(*resume_size_) +
                    " bytes written before the checkpoint, but " +
                    (ec ? "cannot be read (" + ec.message() + ")" : "holds " + std::to_string(size)));
      std::filesystem::resize_file(path_, *resume_size_, ec);
      if (ec) throw Error("CSVLogger: cannot resize " + path_.string() + ": " + ec.message());
      written_ = *resume_size_;
    }
    const bool appending = resume_size_ || o_.append;
    file_.reset(std::fopen(path_.string().c_str(), appending ? "ab" : "wb"));
    if (!file_) throw Error("CSVLogger: cannot open " + path_.string() + " for writing");
    if (appending && !resume_size_) written_ = std::filesystem::file_size(path_, ec);
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
  std::optional<std::uintmax_t> resume_size_;  // a resumed run: the file's size at the checkpoint
  std::uintmax_t written_ = 0;                 // the file's size (as written by this logger)
};

}  // namespace strata::nn
