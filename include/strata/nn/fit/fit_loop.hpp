#pragma once
//! fit's epochs, as a model runs them over its executor: callbacks,
//! progress lines, validation, history. What a step does and where it runs
//! is the executor's (execution/executor.hpp).
//!   History h = strata::nn::detail::fit_epochs(executor, dataset, opts, make_pass, logs_of, validate);

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include <cxxabi.h>

#include <strata/nn/checkpoints/checkpoint_format.hpp>
#include <strata/nn/program/data_pass.hpp>
#include <strata/nn/callbacks/logs.hpp>
#include <strata/nn/fit/model_options.hpp>
#include <strata/execution/executor.hpp>

namespace strata::nn::detail {

//! When a backed-up fit calls FitResume::after.
enum class FitMoment {
  Step,         //!< after a training step (the executor's state may still be moving: see settled)
  PassStopped,  //!< after a pass that `after` stopped early, its steps all applied
  EpochEnd,     //!< after an epoch, its validation and callbacks
};

//! What a backed-up fit (nn/fit/fit_backup.hpp) asks of the epochs: where to
//! start, and a call with the position reached after every training step,
//! after a pass it stopped, and at each epoch's end (it saves when due;
//! true stops the pass: preempted).
struct FitResume {
  bool resumed = false;  //!< start comes from a checkpoint (else: the beginning)
  TrainingPosition start;
  std::string from;  //!< where it resumed from (the checkpoint directory), for fit's message
  //! This worker's running totals of the epoch resumed inside, as they
  //! stood at the checkpoint (nullopt: none, as at an epoch's start), and
  //! every worker's summed (an epoch all of whose steps came before it).
  std::optional<PassTotals> totals, totals_all;
  //! after(position, moment, the pass's running totals: this worker's; null at an epoch's end).
  std::function<bool(const TrainingPosition&, FitMoment, const PassTotals*)> after;
  //! A resumed run: hands the callbacks their state (after on_train_begin,
  //! before the first step); throws, on every worker, to refuse the resume.
  std::function<void()> restore;
};

//! A callback's type, as a name (the id of a callback that gives none).
inline std::string type_name_of(const Callback& cb) {
  const char* mangled = typeid(cb).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}
//! Each callback's id for its state in a checkpoint (Callback::state_id,
//! else its type's name); the second and later with one id get "#2", "#3"...
inline std::vector<std::string> callback_ids(const std::vector<Callback*>& callbacks) {
  std::vector<std::string> ids;
  std::map<std::string, int> seen;
  for (const auto* cb : callbacks) {
    std::string id = cb->state_id();
    if (id.empty()) id = type_name_of(*cb);
    const int n = ++seen[id];
    ids.push_back(n == 1 ? id : id + "#" + std::to_string(n));
  }
  return ids;
}
//! Where a checkpoint keeps entry `key` of the state of the callback with id `id`.
inline std::string callback_key(const std::string& id, const std::string& key) { return "callback/" + id + "/" + key; }
//! Hands every callback the state `state` keeps under its id (an empty one
//! where it keeps none: a callback the run that saved did not have);
//! entries of callbacks this run lacks are ignored. Checkpoints written
//! before ids keyed them by position ("callback/0/..."): read so. Every
//! callback gets its call; returns the first error ("": none).
inline std::string restore_callbacks(const std::vector<Callback*>& callbacks, const CallbackState& state) {
  const auto ids = callback_ids(callbacks);
  bool by_position = !state.empty();
  for (const auto& kv : state)
    by_position = by_position && kv.first.size() > 9 && std::isdigit(static_cast<unsigned char>(kv.first[9]));
  std::string why;
  for (std::size_t i = 0; i < callbacks.size(); ++i) {
    const std::string prefix = by_position ? "callback/" + std::to_string(i) + "/" : callback_key(ids[i], "");
    CallbackState mine;
    for (const auto& [k, v] : state)
      if (k.starts_with(prefix)) mine.emplace_back(k.substr(prefix.size()), v);
    try {
      callbacks[i]->load_state(mine);
    } catch (const std::exception& e) {
      if (why.empty()) why = e.what();
    }
  }
  return why;
}

//! Runs opts.epochs passes of `ds` (each made by make_pass(iterator)) on
//! `ex`; logs_of(totals) makes the logs; validate(logs) adds val_* entries.
//! With `resume`: from its start (the dataset's pass counters set for that
//! epoch, its first `batch` batches skipped, their sums carried into the
//! epoch's, the callbacks' state restored after on_train_begin: a resumed
//! epoch's logs and progress are the whole epoch's), saying where it
//! resumed from, calling its `after`.
//! With opts.check_finite the executor skips steps whose reduced gradient
//! is not finite (execution/program.hpp, Pass::FiniteCheck): an epoch's logs
//! then carry "skipped_steps", its count. An epoch that gets no batch (or
//! only empty ones) throws: there was nothing to train on.
template <class Ds, class MakePass, class LogsOf, class Validate>
History fit_epochs(Executor& ex, const Ds& ds, const FitOptions& opts, MakePass make_pass, LogsOf logs_of,
                   Validate validate, const FitResume* resume = nullptr) {
  History history;
  for (auto* cb : opts.callbacks) {
    cb->stop_training = false;
    cb->on_train_begin();
  }
  const bool resumed = resume && resume->resumed;
  if (resumed) {
    resume->restore();  // before any step: a refusal changes nothing
    if (ex.is_chief() && opts.verbose != Verbosity::Silent) {
      std::fprintf(opts.out, "Resumed from step %lld (epoch %d, batch %zu) in %s\n",
                   static_cast<long long>(resume->start.step), resume->start.epoch + 1, resume->start.batch,
                   resume->from.c_str());
      std::fflush(opts.out);
    }
  }
  Logs logs;
  bool stop = false;
  Pass::FiniteCheck finite{opts.max_bad_steps};
  const int first = resume ? resume->start.epoch : 0;
  for (int epoch = first; epoch < opts.epochs && !stop; ++epoch) {
    for (auto* cb : opts.callbacks) cb->on_epoch_begin(epoch);
    const Verbosity verbose = ex.is_chief() ? opts.verbose : Verbosity::Silent;  // only the chief prints
    if (verbose != Verbosity::Silent) std::fprintf(opts.out, "Epoch %d/%d\n", epoch + 1, opts.epochs);
    std::optional<std::size_t> total = ds.cardinality();
    if (opts.steps_per_epoch) total = total ? std::min(*total, opts.steps_per_epoch) : opts.steps_per_epoch;
    std::size_t skip = 0;
    const PassTotals* carried = nullptr;  // the resumed epoch's sums before its checkpoint
    if (resumed && epoch == first) {
      ds.set_pass_counters(resume->start.data_counters);
      skip = resume->start.batch;
      if (skip > 0 && resume->totals) carried = &*resume->totals;
    }
    const std::size_t carried_samples = carried ? carried->samples : 0;
    Progress progress(verbose, opts.out, total, skip);  // the whole epoch's batches; rates: this process's
    TrainingPosition at{0, epoch, skip, resume ? ds.pass_counters() : std::vector<std::uint64_t>{}};
    bool stopped_by_resume = false;
    auto it = ds.iterator();
    for (std::size_t k = 0; k < skip; ++k)  // the batches the resumed run trained already
      if (!it.next()) throw Error("fit: resuming at batch " + std::to_string(skip) + " of epoch " +
                                  std::to_string(epoch + 1) + ", but the dataset ends after " + std::to_string(k));
    std::size_t steps = 0;
    FnPass pass = make_pass(it);
    pass.finite = opts.check_finite ? &finite : nullptr;
    pass.carried = carried;
    const std::size_t skipped_before = finite.skipped;
    const auto with_skipped = [&](Logs l) {
      if (finite.skipped > skipped_before) l.set("skipped_steps", static_cast<double>(finite.skipped - skipped_before));
      return l;
    };
    pass.max_steps = opts.steps_per_epoch ? (opts.steps_per_epoch > skip ? opts.steps_per_epoch - skip : 0) : 0;
    // A resumed epoch whose steps were all trained before its checkpoint (taken
    // at its last step, before its end): no step to run, its end still to come
    // from its totals (a checkpoint that kept none: the epoch skipped, as before).
    const bool trained_already = opts.steps_per_epoch && pass.max_steps == 0;
    if (trained_already && !(resume && resume->totals_all)) continue;
    std::size_t ended = 0;  // the pass's steps whose on_batch_end ran
    PassTotals running;     // the last running totals (what a stopped pass's checkpoint keeps)
    pass.begin_fn = [&](std::size_t s) {
      for (auto* cb : opts.callbacks) cb->on_batch_begin(static_cast<int>(s));
    };
    pass.end_fn = [&](std::size_t s, const PassTotals& t) {
      // running logs (an O(parameters) regularization sum with L2) only for whoever reads them
      progress.update(skip + (steps = s + 1), t.samples - carried_samples, [&] { return with_skipped(logs_of(t)); });
      if (!opts.callbacks.empty()) {
        const Logs running = with_skipped(logs_of(t));
        for (auto* cb : opts.callbacks) {
          set_batches_ended(*cb, s + 1 - ended);
          cb->on_batch_end(static_cast<int>(s), running);
          stop = stop || cb->stop_training;
        }
      }
      ended = s + 1;
      if (resume) {
        at.step = *pass.iteration;
        at.batch = skip + s + 1;
        running = t;
        if (resume->after(at, FitMoment::Step, &t)) stop = stopped_by_resume = true;
      }
      return stop;
    };
    const std::int64_t it0 = *pass.iteration;
    PassTotals t;
    try {
      t = trained_already ? *resume->totals_all : ex.run_pass(pass);
    } catch (const NonFiniteError& e) {
      throw NonFiniteError("fit: epoch " + std::to_string(epoch + 1) + "/" + std::to_string(opts.epochs) + ": " +
                               e.what(),
                           e.step());
    }
    if (stopped_by_resume) {  // every step it ran is applied now: batches trained = steps taken
      at.step = *pass.iteration;
      at.batch = skip + static_cast<std::size_t>(at.step - it0);
      resume->after(at, FitMoment::PassStopped, &running);  // saves, and throws Preempted
      break;
    }
    if (t.samples == 0 && skip == 0)
      throw Error("fit: the dataset gave no batches (or only empty ones) in epoch " + std::to_string(epoch + 1) + "/" +
                  std::to_string(opts.epochs) +
                  ": nothing to train on. Check its size against its batch size and any take, skip or filter");
    logs = with_skipped(logs_of(t));
    validate(logs);
    progress.finish(skip + steps, t.samples - carried_samples, logs);
    history.append(logs);
    for (auto* cb : opts.callbacks) {
      cb->on_epoch_end(epoch, logs);
      stop = stop || cb->stop_training;
    }
    if (resume && !stop &&
        resume->after({*pass.iteration, epoch + 1, 0, ds.pass_counters()}, FitMoment::EpochEnd, nullptr))
      stop = true;
  }
  for (auto* cb : opts.callbacks) cb->on_train_end(logs);
  return history;
}

}  // namespace strata::nn::detail
