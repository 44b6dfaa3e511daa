#pragma once
//! The executor of MirroredStrategy on GPU replicas: each replica keeps its
//! copy of the variables, its gradient, its optimizer state and its
//! activations in its own device's memory, behind its own Compute (its
//! stream); the host hands each replica its rows of the global batch, the
//! replicas' gradients are summed on the devices (strategy/
//! device_collectives.hpp: a reduce kernel among virtual GPUs or GPUs with
//! peer access, else staged through host memory), and every replica applies
//! the same update to its copy. The same step as the CPU replicas'
//! (strategy/sync_executor.hpp): each replica's gradient is that of (its
//! rows' loss sum) / (global batch) plus 1/p of the regularization, summed
//! in replica order, so p replicas take the step one replica takes.
//!   strata::MirroredStrategy s{strata::virtual_gpus(0, 4)};   // 4 replicas on GPU 0
//!   strata::MirroredStrategy s{strata::gpus({0, 1})};          // one per GPU
//! Run on the host's compute (a test substitutes it for the GPU's) it is
//! bitwise MirroredStrategy's CPU run with the direct all-reduce.
//! Gradient finiteness (Pass::finite): after the sum each replica counts
//! the NaN and infinite values of its 1/p slice of it on its device; one
//! host all-reduce of a float decides for all (a skipped step changes
//! nothing). Not yet: the sharded update, workers across processes.

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/strategy/device_collectives.hpp>
#include <strata/strategy/device_compute.hpp>
#include <strata/strategy/executor.hpp>
#include <strata/strategy/program.hpp>

namespace strata::detail {

template <class S>
class DeviceMirroredExecutor final : public Executor {
 public:
  DeviceMirroredExecutor(S& s, ModelProgram& program, MatmulPrecision matmul)
      : s_(s), program_(program), matmul_(matmul) {}

  [[nodiscard]] bool placed() const noexcept override { return !reps_.empty() && reps_.front().rep; }
  //! Which all-reduce the replicas use, and why.
  [[nodiscard]] const std::string& collectives_choice() const noexcept { return colls_->choice(); }

  void place(const Tensor<float>& init) override {
    const std::size_t n = program_.num_params();
    if (init.size() != n)
      throw ShapeError("DeviceMirroredExecutor::place: " + std::to_string(init.size()) + " initial values for " +
                       std::to_string(n) + " parameters");
    const std::vector<Device>& devices = s_.devices();
    if (reps_.size() != devices.size()) {
      reps_.clear();
      reps_.resize(devices.size());
      for (std::size_t r = 0; r < devices.size(); ++r) reps_[r].c = make_compute(devices[r], matmul_);
      colls_ = make_device_collectives(devices, s_.options());
    }
    colls_->reset();
    for (Replica& R : reps_) {
      R.rep.reset();
      R.value.resize(*R.c, Shape{n});
      R.grad.resize(*R.c, Shape{n});
      if (n) R.c->upload(R.value.data(), init.data(), init.bytes());
      R.c->fill(R.grad.data(), 0.f, n);
      R.rep = program_.make_replica_on(*R.c, {R.value.data(), n}, {R.grad.data(), n});
    }
    host_.reset();
    reset_optimizer();
  }

  void reset_optimizer() override {
    for (Replica& R : reps_) {
      R.updater.reset();
      if (R.rep && program_.compiled()) R.updater = program_.make_updater_on(*R.c, program_.num_params());
    }
  }
  //! Replica 0's (every replica's is the same).
  std::vector<Tensor<float>> optimizer_state() override {
    if (reps_.empty() || !reps_.front().updater) return {};
    return reps_.front().updater->state();
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (reps_.empty() || !reps_.front().updater)
      throw Error("set_optimizer_state: the model is not compiled and placed yet");
    for (Replica& R : reps_) R.updater->set_state(slots);
  }

  //! Replica 0's copy, read back from its device (cached until it changes).
  [[nodiscard]] const Tensor<float>& value() const override {
    if (!host_) {
      host_.emplace(Shape{program_.num_params()});
      if (host_->size()) reps_.front().c->download(host_->data(), reps_.front().value.data(), host_->bytes());
    }
    return *host_;
  }
  void assign(const Tensor<float>& v) override {
    if (v.size() != program_.num_params())
      throw ShapeError("DeviceMirroredExecutor::assign: " + std::to_string(v.size()) + " values for " +
                       std::to_string(program_.num_params()) + " parameters");
    for (Replica& R : reps_)
      if (v.size()) R.c->upload(R.value.data(), v.data(), v.bytes());
    host_.reset();
  }

  PassTotals run_pass(Pass& pass) override {
    return run_batches(pass, program_.num_metrics(), [&](const Batch& b, std::size_t index, PassTotals& t) {
      if (const std::size_t rows = b.x->shape()[0]) step(b, pass, rows, t, index);
    });
  }

 private:
  struct Replica {
    std::unique_ptr<kernels::Compute> c;
    kernels::Buffer<float> value, grad;
    kernels::Buffer<double> bad;
    std::unique_ptr<ReplicaProgram> rep;
    std::unique_ptr<Updater> updater;
    ReplicaResult result;
  };

  void step(const Batch& b, Pass& pass, std::size_t global, PassTotals& t, std::size_t index) {
    const bool train = pass.phase == Phase::Train;
    if (train && !reps_.front().updater) throw Error("Sequential: compile the model first (optimizer and loss)");
    const float scale = 1.f / static_cast<float>(global);
    const std::int64_t it = *pass.iteration;
    const bool check = train && pass.finite;
    bad_ = 0;
    try {
      s_.run([&](auto& ctx) {
        const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
        try {
          replica_step(ctx, r, b, pass.phase, global, scale, it, check);
        } catch (const std::exception& e) {
          colls_->abort(static_cast<int>(r), e.what());
          throw;
        }
      });
    } catch (...) {
      // No replica runs now: let every device finish what was queued (a
      // collective's kernels may still touch a failed replica's buffers),
      // then the next step starts clean.
      for (Replica& R : reps_) try {
          R.c->synchronize();
        } catch (...) {  // the failure being reported is the one that counts
        }
      colls_->reset();
      throw;
    }
    if (pass.phase != Phase::Predict)
      for (const Replica& R : reps_) t.add(R.result.loss, R.result.rows, R.result.metrics);  // replica order
    t.samples += global;
    if (!train) return;
    host_.reset();
    if (bad_ > 0) return pass.skip_step(index, it, bad_);
    pass.applied_step();
    ++*pass.iteration;
  }

  template <class Ctx>
  void replica_step(Ctx& ctx, std::size_t r, const Batch& b, Phase phase, std::size_t global, float scale,
                    std::int64_t it, bool check) {
    Replica& R = reps_[r];
    const std::size_t p = reps_.size(), n = program_.num_params();
    const int rank = static_cast<int>(r);
    R.c->bind_thread();  // this pool thread issues replica r's calls: its GPU current
    R.rep->step(b, shard_range(global, p, r),
                StepInfo{phase, rank, static_cast<int>(p), static_cast<std::uint64_t>(it), scale}, R.result);
    if (phase != Phase::Train) return;
    colls_->all_reduce_sum(rank, *R.c, R.grad.data(), n);
    if (check) {
      const Range mine = shard_range(n, p, r);
      double local = 0;
      R.bad.resize(*R.c, Shape{1});
      R.c->upload(R.bad.data(), &local, sizeof local);
      R.c->count_nonfinite(R.grad.data() + mine.begin, mine.size(), R.bad.data());
      R.c->download(&local, R.bad.data(), sizeof local);
      float bad[1] = {static_cast<float>(local)};
      ctx.all_reduce(std::span<float>(bad), Sum);
      if (r == 0) bad_ = bad[0];
      if (bad[0] != 0.f) return;  // skipped on every replica: nothing changes
    }
    R.updater->apply({R.value.data(), n}, {R.grad.data(), n}, 0, it);
  }

  S& s_;
  ModelProgram& program_;
  MatmulPrecision matmul_;
  std::vector<Replica> reps_;
  std::unique_ptr<DeviceCollectives> colls_;
  double bad_ = 0;  // the step's NaN and infinite values (written by replica 0)
  mutable std::optional<Tensor<float>> host_;
};

}  // namespace strata::detail
