#pragma once
//! What fit does with a BackupAndRestore among its callbacks: before the
//! epochs, resume from the newest checkpoint every worker sees; after each
//! step and epoch, save when due (the chief writes, every worker learns
//! whether it worked); on SIGTERM/SIGINT, save after the step and throw
//! Preempted. Across workers every decision is taken together (one sum over
//! the workers), so no worker waits for a save that another skipped.
//!   detail::FitBackup<Sequential> b(model, backup);  b.resume();  fit_epochs(..., &b.hooks());

#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/nn/backup_and_restore.hpp>
#include <strata/nn/checkpoint_format.hpp>
#include <strata/nn/fit_loop.hpp>
#include <strata/nn/preemption.hpp>
#include <strata/strategy/any_strategy.hpp>

namespace strata::nn::detail {

//! Whether every worker has the same `x` (a sum of x, of x squared and of
//! ones over the workers: equal exactly when all are), collective.
inline bool same_on_every_worker(AnyStrategy& s, double x) {
  if (s.num_workers() <= 1) return true;
  std::vector<double> v{x, x * x, 1.0};
  std::vector<double> out(3);
  s.run([&](AnyReplicaContext& ctx) {
    std::vector<double> mine = ctx.local_replica_id() == 0 ? v : std::vector<double>(3, 0.0);
    ctx.all_reduce(mine, Sum);
    if (ctx.local_replica_id() == 0) out = mine;
  });
  return out[0] * out[0] == out[1] * out[2];  // (sum x)^2 == n sum x^2 iff all equal
}

//! The sum over workers of each worker's `v` (one value per worker: the
//! first local replica contributes it); `v` itself with one worker.
inline std::vector<double> sum_over_workers(AnyStrategy& s, std::vector<double> v) {
  if (s.num_workers() <= 1) return v;
  std::vector<double> out(v.size());
  s.run([&](AnyReplicaContext& ctx) {
    std::vector<double> mine = ctx.local_replica_id() == 0 ? v : std::vector<double>(v.size(), 0.0);
    ctx.all_reduce(mine, Sum);
    if (ctx.local_replica_id() == 0) out = mine;
  });
  return out;
}

template <class Model>
class FitBackup {
 public:
  FitBackup(Model& m, BackupAndRestore& b) : m_(m), b_(b) {
    if (b_.options().handle_signals) guard_ = std::make_unique<PreemptionGuard>();
    resume_.after = [this](const TrainingPosition& p, FitMoment m) { return after(p, m); };
  }

  //! Finds the newest checkpoint (agreed across workers) and loads it; the
  //! position fit starts from (the beginning without one).
  const FitResume& resume() {
    AnyStrategy& s = m_.strategy();
    if (m_.is_chief()) {
      b_.prepare();
      b_.prune();  // temporary files of a killed writer
    }
    auto all = b_.checkpoints();
    if (!same_on_every_worker(s, static_cast<double>(all.size())))  // the loop below is collective
        throw Error("BackupAndRestore: the workers see different numbers of checkpoints in " + b_.dir().string() +
                    " (this one: " + std::to_string(all.size()) + "); give every worker the same directory");
    // newest first; a file that fails its checks (flipped bits) is reported and skipped
    std::optional<TrainingPosition> loaded;
    std::int64_t step = -1;
    for (auto i = all.rbegin(); i != all.rend() && !loaded; ++i) {
      if (!same_on_every_worker(s, static_cast<double>(i->first)))
        throw Error("BackupAndRestore: the workers see different newest checkpoints in " + b_.dir().string() +
                    " (this one: step " + std::to_string(i->first) + "); give every worker the same directory");
      try {
        loaded = m_.load_checkpoint(i->second);
        step = i->first;
      } catch (const Preempted&) {
        throw;
      } catch (const Error& e) {
        if (m_.is_chief()) std::fprintf(stderr, "BackupAndRestore: skipping %s: %s\n", i->second.string().c_str(), e.what());
      }
      auto ok = sum_over_workers(s, {loaded ? 1.0 : 0.0});
      if (ok[0] != 0 && ok[0] != static_cast<double>(s.num_workers()))
        throw Error("BackupAndRestore: checkpoint " + i->second.string() + " loaded on some workers only");
    }
    b_.resumed_from_ = loaded ? std::optional<std::int64_t>(step) : std::nullopt;
    if (loaded) {
      resume_.resumed = true;
      resume_.start = *loaded;
      resumed_from_ = step;
    }
    return resume_;
  }
  [[nodiscard]] const FitResume& hooks() const noexcept { return resume_; }
  //! The step of the checkpoint fit resumed from (nullopt: it started afresh).
  [[nodiscard]] std::optional<std::int64_t> resumed_from() const noexcept { return resumed_from_; }

  //! After a completed fit (delete_at_end): the checkpoints go.
  void finished() {
    if (b_.options().delete_at_end && m_.is_chief()) b_.clear();
  }

 private:
  //! Under an executor whose state settles only when its pass ends (a
  //! parameter server: steps in flight), a step's end saves nothing: a
  //! signal stops the pass, which then saves (PassStopped); periodic saves
  //! happen at epoch ends only.
  bool after(const TrainingPosition& p, FitMoment m) {
    AnyStrategy& s = m_.strategy();
    if (m == FitMoment::PassStopped) {
      save(p);
      throw Preempted(signal_ ? signal_ : SIGTERM, b_.path_for(p.step).string());
    }
    const int sig = guard_ ? PreemptionGuard::pending() : 0;
    auto decide = sum_over_workers(s, {static_cast<double>(sig != 0)});
    const bool preempt = decide[0] > 0;
    if (m == FitMoment::Step && !m_.state_settled_between_steps()) {
      signal_ = sig;
      return preempt;  // stop the pass; it saves when its steps are all applied
    }
    if (!preempt && m == FitMoment::Step && !b_.due(p.step)) return false;
    save(p);
    if (preempt) throw Preempted(sig ? sig : SIGTERM, b_.path_for(p.step).string());
    return false;
  }

  void save(const TrainingPosition& p) {
    const auto path = b_.path_for(p.step);
    std::string why;
    if (m_.is_chief()) {
      try {
        m_.save_checkpoint(path, p);
        b_.prune();
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
  std::unique_ptr<PreemptionGuard> guard_;
  FitResume resume_;
  std::optional<std::int64_t> resumed_from_;
  int signal_ = 0;
};

}  // namespace strata::nn::detail
