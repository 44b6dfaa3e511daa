#pragma once
//! What fit does with a BackupAndRestore among its callbacks: before the
//! epochs, resume from the newest checkpoint every worker sees; after each
//! step and epoch, save when due (the chief writes, every worker learns
//! whether it worked); on SIGTERM/SIGINT, save after the step and throw
//! Preempted. Across workers every decision is taken together (one sum over
//! the workers), so no worker waits for a save that another skipped. Each
//! checkpoint also keeps the callbacks' state (Callback::save_state) and a
//! learning rate set at run time; a resumed run gets both back.
//!   detail::FitBackup<Sequential> b(model, backup);  b.resume();  fit_epochs(..., &b.hooks());

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/trace.hpp>
#include <strata/nn/callbacks/backup_and_restore.hpp>
#include <strata/nn/checkpoints/checkpoint_format.hpp>
#include <strata/nn/fit/epoch_totals.hpp>
#include <strata/nn/fit/fit_callbacks.hpp>
#include <strata/nn/fit/fit_loop.hpp>
#include <strata/nn/optimizers/learning_rate.hpp>
#include <strata/nn/callbacks/monitor.hpp>
#include <strata/nn/checkpoints/preemption.hpp>
#include <strata/nn/checkpoints/run_record.hpp>
#include <strata/strategy/any_strategy.hpp>

namespace strata::nn::detail {

template <class Model>
class FitBackup {
 public:
  //! `fields`: what makes this run the same run (nn/checkpoints/run_record.hpp);
  //! `epochs`: the epochs this fit asks for.
  //! `callbacks`: fit's (their state goes into each checkpoint); `access`: what they see of the model.
  FitBackup(Model& m, BackupAndRestore& b, std::vector<std::pair<std::string, std::string>> fields, int epochs,
            std::vector<Callback*> callbacks, ModelAccess& access)
      : m_(m), b_(b), fields_(std::move(fields)), epochs_(epochs), callbacks_(std::move(callbacks)), access_(access) {
    if (b_.options().handle_signals) guard_ = std::make_unique<PreemptionGuard>();
    resume_.after = [this](const TrainingPosition& p, FitMoment m, const PassTotals* running) {
      return after(p, m, running);
    };
    resume_.restore = [this] { restore_callbacks_or_refuse(); };
  }

  //! The chief takes the directory (its lock, then its run record: ours,
  //! another run's, or none yet), every worker learns whether it could;
  //! then the newest checkpoint of this run that every worker can load is
  //! loaded. Returns the position fit starts from (the beginning without
  //! one). Refuses, on every worker, a directory that belongs to another
  //! run or holds no checkpoint this run can resume from (unless
  //! start_over), and a checkpoint past the end of this fit's epochs.
  const FitResume& resume() {
    AnyStrategy& s = m_.strategy();
    b_.resumed_at_.reset();
    std::exception_ptr refused;
    if (m_.is_chief()) {
      try {
        claim();
      } catch (...) {
        refused = std::current_exception();
      }
    }
    if (sum_over_workers(s, {refused ? 1.0 : 0.0})[0] > 0) {
      if (b_.lock_) b_.lock_->release_as_found();  // leave no trace where refused
      b_.lock_.reset();
      if (refused) std::rethrow_exception(refused);
      throw CheckpointDirectoryError("BackupAndRestore: the chief (worker 0) refused the checkpoint directory " +
                                     b_.dir().string() + "; its error says why");
    }
    if (!m_.is_chief()) {  // the chief recorded the run: the others read which it is
      auto r = detail::read_run_record(b_.record_path());
      if (!r) throw Error("BackupAndRestore: " + b_.record_path().string() + " vanished after the chief wrote it");
      b_.run_ = {r->id, fields_};
    }
    std::optional<TrainingPosition> loaded;
    std::int64_t step = -1;
    try {
      check_resumable(loaded, step);
    } catch (const CheckpointDirectoryError&) {
      abandon();
      throw;
    }
    b_.resumed_at_ = loaded;
    if (loaded) {
      resume_.resumed = true;
      resume_.start = *loaded;
      resume_.from = b_.dir().string();
      resumed_from_ = step;
      restore_extras(loaded_path_);
    }
    last_step_ = m_.iterations();
    return resume_;
  }
  [[nodiscard]] const FitResume& hooks() const noexcept { return resume_; }
  //! The step of the checkpoint fit resumed from (nullopt: it started afresh).
  [[nodiscard]] std::optional<std::int64_t> resumed_from() const noexcept { return resumed_from_; }

  //! After a completed fit, with delete_at_end: this run's checkpoints go.
  void finished() {
    if (b_.options().delete_at_end && m_.is_chief()) b_.finish();
  }

 private:
  //! A resume refused: no record or lock file this attempt made stays (the
  //! chief's), and this object holds the directory no more.
  void abandon() {
    if (m_.is_chief()) {
      std::error_code ec;
      if (record_made_) std::filesystem::remove(b_.record_path(), ec);
      if (b_.lock_) b_.lock_->release_as_found();
    }
    b_.lock_.reset();
    b_.run_ = {};
    b_.resumed_at_.reset();
  }
  //! Every worker: hands the callbacks their state (fit calls it after
  //! on_train_begin); a callback that refuses it on any worker (a CSV
  //! history missing, say) refuses the resume on every worker, before any
  //! step, the directory left as it was.
  void restore_callbacks_or_refuse() {
    const std::string why = restore_callbacks(callbacks_, callback_state_);
    if (sum_over_workers(m_.strategy(), {why.empty() ? 0.0 : 1.0})[0] == 0) return;
    abandon();
    if (!why.empty()) throw CheckpointDirectoryError("BackupAndRestore: cannot resume from " + b_.dir().string() + ": " + why);
    throw CheckpointDirectoryError("BackupAndRestore: cannot resume from " + b_.dir().string() +
                                   ": the chief refused the callbacks' state; its error says why");
  }
  //! Every worker: loads the newest checkpoint of this run, then refuses a
  //! directory with files named like checkpoints and none resumable, or a
  //! checkpoint past the end of this fit's epochs.
  void check_resumable(std::optional<TrainingPosition>& loaded, std::int64_t& step) {
    std::vector<std::string> unusable;  // every file in a checkpoint's name not resumed from, and why
    if (!b_.options().start_over) load_newest(loaded, step, unusable);
    const std::string dir = b_.dir().string();
    if (!loaded && !unusable.empty()) {
      std::string why;
      for (const auto& u : unusable) why += "\n  " + u;
      throw CheckpointDirectoryError(
          "BackupAndRestore: " + dir + " holds " + std::to_string(unusable.size()) +
          " file(s) named like checkpoints, and this run can resume from none of them:" + why +
          "\nNothing was deleted. Use another directory, or start over there (BackupOptions::start_over; the "
          "examples' --start-over), which leaves files that no run can read where they are");
    }
    if (loaded && (loaded->epoch > epochs_ || (loaded->epoch == epochs_ && loaded->batch > 0)))
      throw CheckpointDirectoryError(
          "BackupAndRestore: the checkpoint of step " + std::to_string(step) + " in " + dir + " stands at epoch " +
          std::to_string(loaded->epoch + (loaded->batch > 0 ? 1 : 0)) +
          (loaded->batch > 0 ? ", batch " + std::to_string(loaded->batch) : std::string(" (its end)")) +
          ", past the end of this fit's " + std::to_string(epochs_) + " epoch(s): it belongs to a longer run. Ask for "
          "at least " + std::to_string(loaded->epoch + (loaded->batch > 0 ? 1 : 0)) +
          " epochs to go on with it, use another directory, or start over (BackupOptions::start_over)");
  }

  //! The chief: lock the directory, then decide whose it is. A run record
  //! naming other settings, or (without a record) a checkpoint of another
  //! run, is refused naming what differs; start_over removes that run's
  //! checkpoints instead and begins a new run. The record is written before
  //! any checkpoint, so a directory with checkpoints of a run has its record.
  void claim() {
    b_.prepare();
    if (!b_.lock_) b_.lock_.emplace(b_.lock_path(), "BackupAndRestore");
    const bool over = b_.options().start_over;
    const std::string dir = b_.dir().string();
    std::optional<RunIdentity> owner;
    try {
      owner = detail::read_run_record(b_.record_path());
    } catch (const Error& e) {
      if (!over)
        throw CheckpointDirectoryError(std::string(e.what()) + ": " + dir +
                                       " may belong to another run; nothing was deleted. Use another directory, or "
                                       "start over (BackupOptions::start_over), which replaces the record");
    }
    if (!owner) {  // no record: a checkpoint that names its run (the record removed by hand)
      const auto all = b_.checkpoints();
      for (auto i = all.rbegin(); i != all.rend() && !owner; ++i) {  // newest first
        try {
          owner = detail::run_in_file(i->second);
        } catch (const Error&) {
        }
      }
    }
    if (owner && !over) {
      const std::string d = detail::differences(*owner, fields_);
      if (d.empty()) {
        b_.run_ = {owner->id, fields_};
        if (!std::filesystem::exists(b_.record_path())) {
          detail::write_run_record(b_.record_path(), b_.run_);
          record_made_ = true;
        }
        b_.prune_temporaries();
        return;
      }
      throw CheckpointDirectoryError("BackupAndRestore: " + dir + " belongs to another run, whose settings differ (" +
                                     d + "): resuming it would not continue that run. Nothing was deleted. Use "
                                     "another directory, or start over there (BackupOptions::start_over; the "
                                     "examples' --start-over), which removes that run's checkpoints");
    }
    if (owner) {  // start_over: the recorded run's checkpoints go (files no run can read stay)
      std::error_code ec;
      for (const auto& c : b_.checkpoints_of(owner->id)) std::filesystem::remove(c.second, ec);
    }
    b_.run_ = {detail::new_run_id(), fields_};
    detail::write_run_record(b_.record_path(), b_.run_);
    record_made_ = true;
    b_.prune_temporaries();
  }

  //! Every worker: the newest checkpoint of this run (or one that names no
  //! run: written before runs were recorded) that every worker loads.
  void load_newest(std::optional<TrainingPosition>& loaded, std::int64_t& step, std::vector<std::string>& unusable) {
    AnyStrategy& s = m_.strategy();
    const auto entries = b_.entries();
    BackupAndRestore::Checkpoints all;
    for (const auto& e : entries) {
      if (e.regular) all.emplace_back(e.step, e.path);
      else {
        unusable.push_back(e.path.string() + " is not a file (a directory?): left alone");
        if (m_.is_chief()) std::fprintf(stderr, "BackupAndRestore: skipping %s: %s\n", e.path.string().c_str(), "not a file (a directory?): left alone");
      }
    }
    if (!same_on_every_worker(s, static_cast<double>(all.size())))  // the loop below is collective
      throw Error("BackupAndRestore: the workers see different numbers of checkpoints in " + b_.dir().string() +
                  " (this one: " + std::to_string(all.size()) + "); give every worker the same directory");
    // newest first; a file that fails its checks (flipped bits) is reported and skipped
    for (auto i = all.rbegin(); i != all.rend() && !loaded; ++i) {
      if (!same_on_every_worker(s, static_cast<double>(i->first)))
        throw Error("BackupAndRestore: the workers see different newest checkpoints in " + b_.dir().string() +
                    " (this one: step " + std::to_string(i->first) + "); give every worker the same directory");
      std::string why;
      try {
        auto run = detail::run_in_file(i->second);
        if (run && run->id != b_.run_.id) why = "it belongs to another run (" + run->id + ")";
        else loaded = m_.load_checkpoint(i->second), loaded_path_ = i->second;
        step = i->first;
      } catch (const Preempted&) {
        throw;
      } catch (const Error& e) {
        why = e.what();
      }
      if (!why.empty()) {
        unusable.push_back(i->second.string() + ": " + why);
        if (m_.is_chief()) std::fprintf(stderr, "BackupAndRestore: skipping %s: %s\n", i->second.string().c_str(), why.c_str());
      }
      auto ok = sum_over_workers(s, {loaded ? 1.0 : 0.0});
      if (ok[0] != 0 && ok[0] != static_cast<double>(s.num_workers()))
        throw Error("BackupAndRestore: checkpoint " + i->second.string() + " loaded on some workers only");
    }
    if (!loaded) step = -1;
  }

  //! Under an executor whose state settles only when its pass ends (a
  //! parameter server: steps in flight), a step's end saves nothing: a
  //! signal stops the pass, which then saves (PassStopped); periodic saves
  //! happen at epoch ends only.
  bool after(const TrainingPosition& p, FitMoment m, const PassTotals* running) {
    AnyStrategy& s = m_.strategy();
    if (m == FitMoment::PassStopped) {
      save(p, running);
      throw Preempted(signal_ ? signal_ : SIGTERM, b_.path_for(p.step).string());
    }
    const int sig = guard_ ? PreemptionGuard::pending() : 0;
    auto decide = sum_over_workers(s, {static_cast<double>(sig != 0)});
    const bool preempt = decide[0] > 0;
    if (m == FitMoment::Step && !m_.state_settled_between_steps()) {
      signal_ = sig;
      return preempt;  // stop the pass; it saves when its steps are all applied
    }
    const std::int64_t from = std::exchange(last_step_, p.step);  // an execution may take several steps
    if (!preempt && m == FitMoment::Step && !b_.due(from, p.step)) return false;
    save(p, m == FitMoment::Step ? running : nullptr);
    if (preempt) throw Preempted(sig ? sig : SIGTERM, b_.path_for(p.step).string());
    return false;
  }

  //! A resumed run's learning rate and callbacks' state, from checkpoint `path` (every worker).
  void restore_extras(const std::filesystem::path& path) {
    const io::TensorFile f = io::read_tensor_file(path, "BackupAndRestore", io::ReadPart::MetadataOnly);
    for (const auto& [k, v] : f.meta)
      if (k.starts_with("callback/")) callback_state_.emplace_back(k, v);
    if (const std::string* t = f.find("epoch_totals"); t && resume_.start.batch > 0) {
      resume_.totals = epoch_totals_of(m_.strategy(), *t, path, false);
      resume_.totals_all = epoch_totals_of(m_.strategy(), *t, path, true);
    }
    if (const std::string* r = f.find("learning_rate_override")) {
      access_.set_learning_rate(std::strtof(r->c_str(), nullptr));
    } else if (LearningRate* lr = m_.optimizer().learning_rate()) {
      lr->set_override(std::nullopt);  // the run had no rate set at run time then
    }
  }
  //! What a checkpoint keeps besides the model: the run, the callbacks' state
  //! (keyed by their ids), a rate set at run time, the epoch's running totals.
  std::vector<std::pair<std::string, std::string>> extras(const std::string& totals) const {
    auto meta = detail::run_meta(b_.run_);
    const auto ids = callback_ids(callbacks_);
    for (std::size_t i = 0; i < callbacks_.size(); ++i)
      for (auto& [k, v] : callbacks_[i]->save_state()) meta.emplace_back(callback_key(ids[i], k), std::move(v));
    if (!totals.empty()) meta.emplace_back("epoch_totals", totals);
    if (const LearningRate* lr = m_.optimizer().learning_rate(); lr && lr->override_rate()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(*lr->override_rate()));
      meta.emplace_back("learning_rate_override", buf);
    }
    return meta;
  }

  void save(const TrainingPosition& p, const PassTotals* running) {
    trace::Span span{"backup", trace::Category::Checkpoint, {{"step", p.step}}};
    const auto path = b_.path_for(p.step);
    const std::string totals = gather_epoch_totals(m_.strategy(), p.batch > 0 ? running : nullptr);  // collective
    std::string why;
    if (m_.is_chief() || m_.state_reads_collective()) {  // sharded state: every worker joins it, the chief writes
      try {
        m_.save_checkpoint(path, p, extras(totals));
        if (m_.is_chief()) b_.prune(p.step);
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    auto ok = sum_over_workers(m_.strategy(), {why.empty() ? 0.0 : 1.0});
    if (!why.empty()) throw Error("BackupAndRestore: " + why);
    if (ok[0] > 0) throw Error("BackupAndRestore: the chief could not write checkpoint " + path.string());
  }

  Model& m_;
  BackupAndRestore& b_;
  std::vector<std::pair<std::string, std::string>> fields_;
  int epochs_;
  bool record_made_ = false;  // the chief wrote the directory's record in this fit
  std::unique_ptr<PreemptionGuard> guard_;
  std::vector<Callback*> callbacks_;
  ModelAccess& access_;
  FitResume resume_;
  std::int64_t last_step_ = 0;  // the model's step at the last call of after (or at the start)
  std::optional<std::int64_t> resumed_from_;
  int signal_ = 0;
  std::filesystem::path loaded_path_;  // the checkpoint resumed from
  CallbackState callback_state_;       // the callbacks' state in it, keyed by callback_key
};

}  // namespace strata::nn::detail
