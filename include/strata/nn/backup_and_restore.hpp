#pragma once
//! BackupAndRestore (as Keras'): given to fit among its callbacks, fit
//! saves a checkpoint into `dir` every `save_every_steps` steps and at each
//! epoch's end, keeps the newest `keep`, and when it starts finds the newest
//! complete checkpoint there and resumes from it at the exact step: same
//! weights, optimizer state, step count, epoch and batch, and dataset
//! position (its shuffles' pass counters), so a run killed and started
//! again ends with the weights of a run never interrupted, bit for bit.
//! SIGTERM/SIGINT during fit finish the step, save, and throw nn::Preempted.
//!   strata::nn::BackupAndRestore backup{"ckpt", {.save_every_steps = 100}};
//!   model.fit(train, {.epochs = 5, .callbacks = {&backup}});
//! Files are named ckpt-<step>.strata and written atomically (a temporary
//! name, renamed into place when complete), so every name that matches is
//! a complete file; across workers the chief writes and every worker
//! agrees on which checkpoint to resume from (or gets an error saying they
//! see different ones).

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/callbacks.hpp>

namespace strata::nn {
namespace detail {
template <class Model>
class FitBackup;
}

struct BackupOptions {
  std::size_t save_every_steps = 0;  //!< also every N optimizer steps (0: at epoch ends only)
  std::size_t keep = 2;              //!< checkpoints kept (the newest); at least 1
  bool delete_at_end = true;         //!< a fit that completes removes its checkpoints (as Keras does)
  bool handle_signals = true;        //!< SIGTERM/SIGINT: finish the step, save, throw Preempted
};

class BackupAndRestore : public Callback {
 public:
  explicit BackupAndRestore(std::filesystem::path dir, BackupOptions o = {}) : dir_(std::move(dir)), o_(o) {
    if (dir_.empty()) throw Error("BackupAndRestore: the directory is empty");
    if (o_.keep == 0) throw Error("BackupAndRestore: keep must be at least 1");
  }
  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
  [[nodiscard]] const BackupOptions& options() const noexcept { return o_; }

  //! The complete checkpoints in dir, oldest first, as (step, path).
  [[nodiscard]] std::vector<std::pair<std::int64_t, std::filesystem::path>> checkpoints() const {
    std::vector<std::pair<std::int64_t, std::filesystem::path>> out;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir_, ec)) return out;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      if (auto step = step_of(e.path().filename().string()); step && e.is_regular_file(ec)) out.emplace_back(*step, e.path());
    }
    if (ec) throw Error("BackupAndRestore: cannot list " + dir_.string() + ": " + ec.message());
    std::sort(out.begin(), out.end());
    return out;
  }
  //! Where the checkpoint of `step` goes.
  [[nodiscard]] std::filesystem::path path_for(std::int64_t step) const {
    char name[40];
    std::snprintf(name, sizeof name, "ckpt-%012lld.strata", static_cast<long long>(step));
    return dir_ / name;
  }
  //! Creates dir (and its parents) if missing; a path that is a file is an Error.
  void prepare() const {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec || !std::filesystem::is_directory(dir_))
      throw Error("BackupAndRestore: cannot use " + dir_.string() + " as the checkpoint directory" +
                  (ec ? ": " + ec.message() : ": it is not a directory"));
  }
  //! Keeps the newest `keep`, and removes temporary files that writers
  //! killed mid-write left (never complete, never read).
  void prune() const {
    auto all = checkpoints();
    std::error_code ec;
    for (std::size_t i = 0; i + o_.keep < all.size(); ++i) std::filesystem::remove(all[i].second, ec);
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      const auto name = e.path().filename().string();
      if (name.starts_with("ckpt-") && name.find(".strata.tmp-") != std::string::npos) std::filesystem::remove(e.path(), ec);
    }
  }
  //! Removes every checkpoint (a completed fit, with delete_at_end).
  void clear() const {
    std::error_code ec;
    for (const auto& [step, p] : checkpoints()) std::filesystem::remove(p, ec);
  }
  //! Whether a step's end calls for a checkpoint.
  [[nodiscard]] bool due(std::int64_t step) const noexcept {
    return o_.save_every_steps && step > 0 && static_cast<std::uint64_t>(step) % o_.save_every_steps == 0;
  }

  //! The step of the checkpoint the last fit resumed from (nullopt: it started afresh).
  [[nodiscard]] std::optional<std::int64_t> resumed_from() const noexcept { return resumed_from_; }

 private:
  template <class Model>
  friend class detail::FitBackup;
  static std::optional<std::int64_t> step_of(const std::string& name) {
    constexpr std::string_view pre = "ckpt-", post = ".strata";
    if (name.size() <= pre.size() + post.size() || !name.starts_with(pre) || !name.ends_with(post)) return std::nullopt;
    const char* b = name.data() + pre.size();
    const char* e = name.data() + name.size() - post.size();
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc{} || p != e || v < 0) return std::nullopt;
    return v;
  }

  std::filesystem::path dir_;
  BackupOptions o_;
  std::optional<std::int64_t> resumed_from_;
};

}  // namespace strata::nn
