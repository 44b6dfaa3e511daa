#pragma once
//! fit's epochs, as a model runs them over its executor: callbacks,
//! progress lines, validation, history. What a step does and where it runs
//! is the executor's (strategy/executor.hpp).
//!   History h = strata::nn::detail::fit_epochs(executor, dataset, opts, make_pass, logs_of, validate);

#include <cstdio>
#include <optional>

#include <strata/nn/data_pass.hpp>
#include <strata/nn/logs.hpp>
#include <strata/nn/model_options.hpp>
#include <strata/strategy/executor.hpp>

namespace strata::nn::detail {

//! Runs opts.epochs passes of `ds` (each made by make_pass(iterator)) on
//! `ex`; logs_of(totals) makes the logs; validate(logs) adds val_* entries.
template <class Ds, class MakePass, class LogsOf, class Validate>
History fit_epochs(Executor& ex, const Ds& ds, const FitOptions& opts, MakePass make_pass, LogsOf logs_of,
                   Validate validate) {
  History history;
  for (auto* cb : opts.callbacks) {
    cb->stop_training = false;
    cb->on_train_begin();
  }
  Logs logs;
  bool stop = false;
  for (int epoch = 0; epoch < opts.epochs && !stop; ++epoch) {
    for (auto* cb : opts.callbacks) cb->on_epoch_begin(epoch);
    const Verbosity verbose = ex.is_chief() ? opts.verbose : Verbosity::Silent;  // only the chief prints
    if (verbose != Verbosity::Silent) std::fprintf(opts.out, "Epoch %d/%d\n", epoch + 1, opts.epochs);
    std::optional<std::size_t> total = ds.cardinality();
    if (opts.steps_per_epoch) total = total ? std::min(*total, opts.steps_per_epoch) : opts.steps_per_epoch;
    Progress progress(verbose, opts.out, total);
    auto it = ds.iterator();
    std::size_t steps = 0;
    FnPass pass = make_pass(it);
    pass.max_steps = opts.steps_per_epoch;
    pass.begin_fn = [&](std::size_t s) {
      for (auto* cb : opts.callbacks) cb->on_batch_begin(static_cast<int>(s));
    };
    pass.end_fn = [&](std::size_t s, const PassTotals& t) {
      // running logs (an O(parameters) regularization sum with L2) only for whoever reads them
      progress.update(steps = s + 1, t.samples, [&] { return logs_of(t); });
      if (!opts.callbacks.empty()) {
        const Logs running = logs_of(t);
        for (auto* cb : opts.callbacks) {
          cb->on_batch_end(static_cast<int>(s), running);
          stop = stop || cb->stop_training;
        }
      }
      return stop;
    };
    const PassTotals t = ex.run_pass(pass);
    logs = logs_of(t);
    validate(logs);
    progress.finish(steps, t.samples, logs);
    history.append(logs);
    for (auto* cb : opts.callbacks) {
      cb->on_epoch_end(epoch, logs);
      stop = stop || cb->stop_training;
    }
  }
  for (auto* cb : opts.callbacks) cb->on_train_end(logs);
  return history;
}

}  // namespace strata::nn::detail
