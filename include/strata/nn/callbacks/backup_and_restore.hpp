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
#include <climits>
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
#include <strata/io/dir_lock.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/checkpoints/checkpoint_format.hpp>
#include <strata/nn/checkpoints/run_record.hpp>

namespace strata::nn {
namespace detail {
template <class Model>
class FitBackup;
}

struct BackupOptions {
  std::size_t save_every_steps = 0;  //!< also every N optimizer steps (0: at epoch ends only)
  std::size_t keep = 2;              //!< this run's checkpoints kept (the newest); at least 1
  bool delete_at_end = true;         //!< a fit that completes removes its checkpoints (as Keras does); set
                                     //!< false when more is written after fit, then call finish() after it
  bool handle_signals = true;        //!< SIGTERM/SIGINT: finish the step, save, throw Preempted
  //! Take over a directory that belongs to another run (its record names
  //! other settings) or holds no checkpoint this run can resume from: that
  //! run's checkpoints and record are removed first; files that no run can
  //! read stay where they are. Without it such a directory is refused.
  bool start_over = false;
};

class BackupAndRestore : public Callback {
 public:
  using Checkpoints = std::vector<std::pair<std::int64_t, std::filesystem::path>>;

  explicit BackupAndRestore(std::filesystem::path dir, BackupOptions o = {}) : dir_(std::move(dir)), o_(o) {
    if (dir_.empty()) throw Error("BackupAndRestore: the directory is empty");
    if (o_.keep == 0) throw Error("BackupAndRestore: keep must be at least 1");
  }
  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
  [[nodiscard]] const BackupOptions& options() const noexcept { return o_; }

  //! Every file named like a checkpoint in dir (ckpt-<step>.strata), oldest
  //! first, as (step, path): whoever wrote it, readable or not.
  [[nodiscard]] Checkpoints checkpoints() const {
    Checkpoints out;
    for (const auto& [step, p, regular] : entries())
      if (regular) out.emplace_back(step, p);
    return out;
  }
  //! This run's checkpoints (their metadata names run `id`), oldest first.
  [[nodiscard]] Checkpoints checkpoints_of(const std::string& id) const {
    Checkpoints out;
    for (const auto& c : checkpoints())
      if (run_of_file(c.second) == id) out.push_back(c);
    return out;
  }
  //! Where the checkpoint of `step` goes.
  [[nodiscard]] std::filesystem::path path_for(std::int64_t step) const {
    char name[40];
    std::snprintf(name, sizeof name, "ckpt-%012lld.strata", static_cast<long long>(step));
    return dir_ / name;
  }
  //! The directory's run record and lock file.
  [[nodiscard]] std::filesystem::path record_path() const { return dir_ / "run.strata"; }
  [[nodiscard]] std::filesystem::path lock_path() const { return dir_ / "run.lock"; }
  //! The run this object backs up (empty before a fit claimed the directory).
  [[nodiscard]] const std::string& run_id() const noexcept { return run_.id; }

  //! Creates dir (and its parents) if missing; a path that is a file is an Error.
  void prepare() {
    std::error_code ec;
    if (!std::filesystem::exists(dir_, ec)) created_dir_ = true;
    std::filesystem::create_directories(dir_, ec);
    if (ec || !std::filesystem::is_directory(dir_))
      throw Error("BackupAndRestore: cannot use " + dir_.string() + " as the checkpoint directory" +
                  (ec ? ": " + ec.message() : ": it is not a directory"));
  }
  //! Keeps this run's newest `keep` checkpoints at or below step `newest`
  //! (a higher one of this run is a file its resume could not read: left
  //! until overwritten), and removes the temporary files that writers killed
  //! mid-write left. Never touches a file this run did not write. Runs under
  //! the directory's lock (taken for the call when no fit holds it).
  void prune(std::int64_t newest = INT64_MAX) {
    std::optional<io::DirLock> held;
    if (!lock_) held.emplace(lock_path(), "BackupAndRestore");
    if (!run_.id.empty()) {
      Checkpoints mine;
      for (const auto& c : checkpoints_of(run_.id))
        if (c.first <= newest) mine.push_back(c);
      std::error_code ec;
      for (std::size_t i = 0; i + o_.keep < mine.size(); ++i) std::filesystem::remove(mine[i].second, ec);
    }
    prune_temporaries();
  }
  //! Removes this run's checkpoints (and nothing else).
  void clear() const {
    std::error_code ec;
    if (!run_.id.empty())
      for (const auto& c : checkpoints_of(run_.id)) std::filesystem::remove(c.second, ec);
  }
  //! Once everything the run was asked to write is written (fit with
  //! delete_at_end calls it when it completes; with delete_at_end = false,
  //! call it after the final evaluation and saves): this run's checkpoints,
  //! then its record go, the lock is released, and the directory is removed
  //! if this object created it and it is empty. Files of other runs and
  //! files nobody can read stay. Only the chief calls it across workers.
  void finish() {
    if (run_.id.empty()) return;
    clear();
    std::error_code ec;
    if (auto r = read_record_quietly(); r && r->id == run_.id) std::filesystem::remove(record_path(), ec);
    if (lock_) lock_->remove_and_release();
    lock_.reset();
    run_ = {};
    if (created_dir_ && std::filesystem::is_empty(dir_, ec)) std::filesystem::remove(dir_, ec);
  }
  //! Whether a step's end calls for a checkpoint.
  [[nodiscard]] bool due(std::int64_t step) const noexcept { return due(step - 1, step); }
  //! Whether the steps after `from` up to `to` (an execution's:
  //! CompileOptions::steps_per_execution) reached a multiple of save_every_steps.
  [[nodiscard]] bool due(std::int64_t from, std::int64_t to) const noexcept {
    if (!o_.save_every_steps || to <= from || to <= 0) return false;
    const auto every = static_cast<std::int64_t>(o_.save_every_steps);
    return to / every > std::max<std::int64_t>(from, 0) / every;
  }

  //! The step of the checkpoint the last fit resumed from (nullopt: it started afresh).
  [[nodiscard]] std::optional<std::int64_t> resumed_from() const noexcept {
    return resumed_at_ ? std::optional<std::int64_t>(resumed_at_->step) : std::nullopt;
  }
  //! Where the last fit resumed (step, epoch, batch; nullopt: it started afresh).
  [[nodiscard]] const std::optional<TrainingPosition>& resumed_at() const noexcept { return resumed_at_; }

 private:
  template <class Model>
  friend class detail::FitBackup;
  //! The temporary files of writers killed mid-write (the lock is held:
  //! no live writer uses this directory).
  void prune_temporaries() const {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      const auto name = e.path().filename().string();
      if ((name.starts_with("ckpt-") || name.starts_with("run.strata")) && name.find(".strata.tmp-") != std::string::npos)
        std::filesystem::remove(e.path(), ec);
    }
  }
  struct Entry {
    std::int64_t step;
    std::filesystem::path path;
    bool regular;  // a file (else a directory or something else in a checkpoint's name)
  };
  [[nodiscard]] std::vector<Entry> entries() const {
    std::vector<Entry> out;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir_, ec)) return out;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
      if (auto step = step_of(e.path().filename().string())) out.push_back({*step, e.path(), e.is_regular_file(ec)});
    if (ec) throw Error("BackupAndRestore: cannot list " + dir_.string() + ": " + ec.message());
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.step < b.step; });
    return out;
  }
  //! The run id in a checkpoint's metadata ("" when it names none or cannot be read).
  static std::string run_of_file(const std::filesystem::path& p) {
    try {
      auto r = detail::run_in_file(p);
      return r ? r->id : std::string();
    } catch (const Error&) {
      return {};
    }
  }
  [[nodiscard]] std::optional<RunIdentity> read_record_quietly() const {
    try {
      return detail::read_run_record(record_path());
    } catch (const Error&) {
      return std::nullopt;
    }
  }
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
  std::optional<io::DirLock> lock_;  // held by the chief from fit's start to finish() (or destruction)
  RunIdentity run_;                  // this run (id empty until a fit claims the directory)
  bool created_dir_ = false;
  std::optional<TrainingPosition> resumed_at_;
};

namespace detail {
//! The one BackupAndRestore among fit's callbacks (null: none); two are an error.
inline BackupAndRestore* backup_among(const std::vector<Callback*>& callbacks) {
  BackupAndRestore* found = nullptr;
  for (auto* cb : callbacks)
    if (auto* b = dynamic_cast<BackupAndRestore*>(cb)) {
      if (found) throw Error("fit: more than one BackupAndRestore among the callbacks");
      found = b;
    }
  return found;
}
}  // namespace detail

}  // namespace strata::nn
