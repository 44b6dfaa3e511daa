#pragma once
//! What fit gives its callbacks: the model (ModelAccessOf, handed to each
//! for the fit by CallbacksSeeModel), and across workers the chief's epoch
//! logs on every worker (agree_on_chiefs), over sums across the workers
//! (the ones BackupAndRestore's decisions use too).
//!   detail::ModelAccessOf<Sequential> access(model);  detail::CallbacksSeeModel seen(opts.callbacks, access);

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/optimizers/learning_rate.hpp>
#include <strata/nn/callbacks/logs.hpp>
#include <strata/nn/program/model_access.hpp>
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

//! Logs made the chief's on every worker (collective; the same names on
//! every worker, else an Error): what the callbacks decide from.
inline void agree_on_chiefs(AnyStrategy& s, bool chief, Logs& logs) {
  if (s.num_workers() <= 1) return;
  const auto& items = logs.items();
  if (!same_on_every_worker(s, static_cast<double>(items.size())))
    throw Error("fit: the workers' epoch logs hold different values (this one: " + std::to_string(items.size()) + ")");
  std::vector<double> v;
  for (const auto& kv : items) v.push_back(chief ? kv.second : 0.0);
  v = sum_over_workers(s, std::move(v));
  Logs out;
  for (std::size_t i = 0; i < items.size(); ++i) out.set(items[i].first, v[i]);
  logs = std::move(out);
}

//! The model as its callbacks see it (nn/program/model_access.hpp), over a Sequential-like `Model`.
template <class Model>
class ModelAccessOf final : public ModelAccess {
 public:
  explicit ModelAccessOf(Model& m) : m_(m) {}
  bool is_chief() const override { return m_.is_chief(); }
  bool state_reads_collective() const override { return m_.state_reads_collective(); }
  std::vector<io::NamedTensor> get_weights() const override { return m_.get_weights(); }
  void set_weights(const std::vector<io::NamedTensor>& ws) override { m_.set_weights(ws); }
  void save_weights(const std::filesystem::path& path) const override { m_.save_weights(path); }
  void save_checkpoint(const std::filesystem::path& path) override { m_.save_checkpoint(path); }
  std::int64_t iterations() const override { return m_.iterations(); }
  float learning_rate() const override { return (*rate("read"))(m_.iterations()); }
  void set_learning_rate(float r) override {
    LearningRate* lr = rate("set");
    // the servers of a parameter server in other processes hold optimizers of their own
    if (!m_.strategy().optimizers_in_process())
      throw Error("set_learning_rate: under ParameterServerStrategy across processes the servers, in other "
                  "processes, update with optimizers of their own, which a rate set here cannot reach: use a "
                  "learning-rate schedule in the optimizer (nn/optimizers/learning_rate.hpp) instead");
    lr->set_override(r);
  }
  std::vector<double> from_chief(std::vector<double> v) override {
    if (m_.strategy().num_workers() <= 1) return v;
    if (!m_.is_chief()) std::fill(v.begin(), v.end(), 0.0);
    return sum_over_workers(m_.strategy(), std::move(v));
  }
  bool any_worker(bool mine) override { return sum_over_workers(m_.strategy(), {mine ? 1.0 : 0.0})[0] > 0; }
  void say(const std::string& line) override {
    if (!out_ || !m_.is_chief()) return;
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
  }
  //! Where say() prints (fit's progress output; null: fit is silent).
  void speak_to(std::FILE* out) noexcept { out_ = out; }

 private:
  LearningRate* rate(const char* what) const {
    LearningRate* lr = m_.optimizer().learning_rate();
    if (!lr)
      throw Error(std::string("callbacks: cannot ") + what + " the learning rate of optimizer " + m_.optimizer().name() +
                  ": it exposes none (Optimizer::learning_rate)");
    return lr;
  }
  Model& m_;
  std::FILE* out_ = nullptr;
};

//! Hands `access` to every callback for a fit (Callback::set_model), and takes it back after.
class CallbacksSeeModel {
 public:
  CallbacksSeeModel(const std::vector<Callback*>& cbs, ModelAccess& access) : cbs_(cbs) {
    for (auto* cb : cbs_) cb->set_model(&access);
  }
  CallbacksSeeModel(const CallbacksSeeModel&) = delete;
  CallbacksSeeModel& operator=(const CallbacksSeeModel&) = delete;
  ~CallbacksSeeModel() {
    for (auto* cb : cbs_) cb->set_model(nullptr);
  }

 private:
  const std::vector<Callback*>& cbs_;
};

}  // namespace strata::nn::detail
