#pragma once
//! The executor of Mirrored placement on GPU replicas: each replica keeps
//! its copy of the variables, its gradient, its optimizer state and its
//! activations in its own device's memory, behind its own Compute (its
//! stream); the synchronous loop (sync_executor.hpp) hands each replica its
//! rows of the global batch, the replicas' gradients are summed, and every
//! replica applies the same update to its copy on its device. Each
//! replica's gradient is that of (its rows' loss sum) / (global batch) plus
//! 1/p of the regularization, summed in replica order, so p replicas take
//! the step one replica takes.
//!   strata::MirroredStrategy s{strata::virtual_gpus(0, 4)};   // 4 replicas on GPU 0
//!   strata::MirroredStrategy s{strata::gpus({0, 1})};          // one per GPU
//! How the gradients are summed:
//! - one worker: on the devices, by DeviceCollectives (device_collectives.hpp:
//!   a reduce kernel among virtual GPUs or GPUs with peer access, NCCL
//!   between distinct GPUs, else staged through host memory); each replica
//!   then counts the NaN and infinite values of its 1/p slice of the sum on
//!   its device, and one host all-reduce of a float decides for all;
//! - several workers (MultiWorkerMirroredStrategy with GPU replicas):
//!   hierarchical, as the CPU workers' all-reduce: the local replicas sum on
//!   their devices (DeviceCollectives), local replica 0 sums that across
//!   workers (worker_sum.hpp: NCCL, one rank per worker, where each worker's
//!   replica 0 has a GPU of its own and <strata/nccl_mpi.hpp> is included;
//!   else staged through host memory over MPI), and the local replicas take
//!   its result on their devices; the finiteness is counted on the devices.
//! Central (CentralStorageStrategy with CentralVariables::Gpu): only
//! replica 0 keeps optimizer state and applies the update to its copy, the
//! central one; the others take its values on their devices each step.
//! Run on the host's compute (tests substitute it for the GPU's) it is
//! bitwise the CPU run with the direct all-reduce (central: the CPU
//! CentralStorageStrategy's), in one process and across workers.
//! Sharded update (ZeRO stage 1, as on CPU replicas: ShardedUpdate, Auto
//! from 3 replicas, one process): the gradients are reduce-scattered, each
//! replica updates its 1/p slice of its copy with its 1/p of the optimizer
//! state, and the updated slices are all-gathered into every copy: the same
//! sums, so the same bits, with the optimizer state divided by p.

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/strategy/device_collectives.hpp>
#include <strata/strategy/device_compute.hpp>
#include <strata/strategy/executor_options.hpp>
#include <strata/strategy/sync_executor.hpp>
#include <strata/strategy/worker_sum.hpp>

namespace strata::detail {

template <class S>
class DeviceMirroredExecutor final : public SyncExecutor<S, DeviceMirroredExecutor<S>> {
  using Base = SyncExecutor<S, DeviceMirroredExecutor<S>>;
  friend Base;

 public:
  //! `central`: the update on replica 0 only, its values broadcast (CentralVariables::Gpu).
  DeviceMirroredExecutor(S& s, ModelProgram& program, ExecutorOptions opts, bool central = false)
      : Base(s, program), opts_(opts), central_(central) {}
  // The replicas' programs and updaters hold memory of the computes: they go first.
  ~DeviceMirroredExecutor() override {
    this->reps_.clear();
    workers_sum_.reset();  // may hold an NCCL communicator on replica 0's stream
    for (Replica& R : devs_) R.updater.reset();
  }

  //! Which all-reduce the local replicas use, and why (and, across
  //! workers, how their sums cross workers).
  [[nodiscard]] std::string collectives_choice() const override { return choice_; }

  void reset_optimizer() override {
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      Replica& R = devs_[r];
      R.updater.reset();
      if (program_compiled() && updates(r))
        R.updater = this->program_.make_updater_on(*R.c, sharded_ ? mine(r).size() : this->program_.num_params());
    }
  }
  //! Replica 0's (every replica's is the same); sharded, every replica's slice of it.
  std::vector<Tensor<float>> optimizer_state() override {
    if (devs_.empty() || !devs_.front().updater) return {};
    if (!sharded_) return devs_.front().updater->state();
    return join_state_slices(this->program_.num_params(), devs_.size(),
                             [&](std::size_t r) { return devs_[r].updater->state(); });
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (devs_.empty() || !devs_.front().updater)
      throw Error("set_optimizer_state: the model is not compiled and placed yet");
    check_state_slots(slots, this->program_.num_params());
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      if (!devs_[r].updater) continue;
      if (sharded_) devs_[r].updater->set_state(state_slice(slots, mine(r)));
      else devs_[r].updater->set_state(slots);
    }
  }
  //! Whether the update is sharded over the replicas (decided when the variables are placed).
  [[nodiscard]] bool sharded() const noexcept { return sharded_; }

  //! Replica 0's copy, read back from its device (cached until it changes).
  [[nodiscard]] const Tensor<float>& value() const override {
    if (!host_) {
      host_.emplace(Shape{this->program_.num_params()});
      if (host_->size()) devs_.front().c->download(host_->data(), devs_.front().value.data(), host_->bytes());
    }
    return *host_;
  }
  void assign(const Tensor<float>& v) override {
    if (v.size() != this->program_.num_params())
      throw ShapeError("DeviceMirroredExecutor::assign: " + std::to_string(v.size()) + " values for " +
                       std::to_string(this->program_.num_params()) + " parameters");
    for (Replica& R : devs_)
      if (v.size()) R.c->upload(R.value.data(), v.data(), v.bytes());
    host_.reset();
  }

 private:
  struct Replica : DeviceReplicaBuffers {
    kernels::Buffer<float> shard;  // sharded update: its slice of the summed gradient, then of the updated values
    kernels::Buffer<double> bad;
    std::unique_ptr<Updater> updater;
  };

  [[nodiscard]] bool program_compiled() const { return this->program_.compiled() && !this->reps_.empty(); }
  //! Whether replica r applies the update (every one, or only the central one).
  [[nodiscard]] bool updates(std::size_t r) const noexcept { return !central_ || r == 0; }
  //! Replica r's slice of the parameters (the sharded update's, the finiteness count's).
  [[nodiscard]] Range mine(std::size_t r) const { return shard_range(this->program_.num_params(), devs_.size(), r); }

  // -- SyncExecutor's hooks -------------------------------------------------
  void place_values(const Tensor<float>& init, std::size_t local) {
    this->reps_.clear();  // bound to the buffers below
    const std::vector<Device>& devices = this->s_.devices();
    if (devs_.size() != local) {
      workers_sum_.reset();
      for (Replica& R : devs_) R.updater.reset();
      devs_.clear();
      devs_.resize(local);
      for (std::size_t r = 0; r < local; ++r) devs_[r].c = make_compute(devices[r], opts_.matmul);
      colls_ = make_device_collectives(devices, this->s_.options());
      choice_ = colls_->choice();
      // sharded as on CPU replicas (mirrored_executor.hpp): in one process, from 3 replicas unless told
      sharded_ = !central_ && this->workers_.size() == 1 && shards_update(opts_.sharded_update, local);
      if (sharded_)
        choice_ += "; the update sharded over the replicas (reduce-scatter, each updates its 1/" +
                   std::to_string(local) + " slice with its 1/" + std::to_string(local) +
                   " of the optimizer state, all-gather)";
      if (central_)
        choice_ += "; the variables and the update on replica 0's device (central storage), its values sent to "
                   "the other replicas' devices each step";
      if constexpr (requires { this->s_.make_worker_sum(*devs_.front().c); })
        if (this->workers_.size() > 1) {  // collective over the workers, as place() is
          workers_sum_ = this->s_.make_worker_sum(*devs_.front().c);
          choice_ += "; across workers: " + workers_sum_->choice();
        }
    }
    colls_->reset();
    for (Replica& R : devs_) {
      R.value.resize(*R.c, Shape{init.size()});
      R.grad.resize(*R.c, Shape{init.size()});
      if (init.size()) R.c->upload(R.value.data(), init.data(), init.bytes());
      R.c->fill(R.grad.data(), 0.f, init.size());
    }
    for (std::size_t r = 0; r < devs_.size(); ++r)
      if (sharded_) devs_[r].shard.resize(*devs_[r].c, Shape{mine(r).size()});
    host_.reset();
  }
  std::unique_ptr<ReplicaProgram> make_replica(std::size_t r) {
    const std::size_t n = this->program_.num_params();
    return this->program_.make_replica_on(*devs_[r].c, {devs_[r].value.data(), n}, {devs_[r].grad.data(), n});
  }
  void before_step(std::size_t r) {
    devs_[r].c->bind_thread();  // this pool thread issues replica r's calls: its GPU current
    if (r == 0) host_.reset();  // the cached value may change (only replica 0's thread touches it in a run)
  }
  //! A step failed: let every device finish what was queued (a collective's
  //! kernels may still touch a failed replica's buffers), then forget the
  //! collectives' state so that the next step starts clean.
  void after_failure() {
    for (Replica& R : devs_) try {
        R.c->synchronize();
      } catch (...) {  // the failure being reported is the one that counts
      }
    colls_->reset();
  }

  template <class Ctx>
  void apply(Ctx& ctx, std::size_t r, std::int64_t it) {
    Replica& R = devs_[r];
    const std::size_t n = this->program_.num_params();
    const std::size_t p = devs_.size();
    try {
      const int me = static_cast<int>(r);
      if (sharded_) {
        // reduce-scatter, update this replica's slice, all-gather the updated slices (from a buffer no one
        // writes meanwhile); a skipped step leaves every slice as it was
        const Range m = mine(r);
        colls_->reduce_scatter_sum(me, *R.c, R.grad.data(), R.shard.data(), n);
        if (this->check_ && !finite_on_device(ctx, r, R.shard.data(), m.size())) return;
        R.updater->apply({R.value.data() + m.begin, m.size()}, {R.shard.data(), m.size()}, 0, it);
        if (m.size()) R.c->copy(R.shard.data(), R.value.data() + m.begin, m.size() * sizeof(float));
        colls_->all_gather(me, *R.c, R.shard.data(), R.value.data(), n);
        return;
      }
      if (workers_sum_) {
        // Across workers, hierarchical: the local sum on the devices (replica
        // order), replica 0 sums it across workers, the others take its result.
        if (p > 1) colls_->all_reduce_sum(me, *R.c, R.grad.data(), n);
        if (r == 0) workers_sum_->all_reduce_sum(*R.c, R.grad.data(), n);
        if (p > 1) colls_->broadcast(me, *R.c, R.grad.data(), n, 0);
      } else {
        colls_->all_reduce_sum(me, *R.c, R.grad.data(), n);
      }
      if (this->check_ && !finite_on_device(ctx, r, R.grad.data() + mine(r).begin, mine(r).size())) return;
      if (updates(r)) R.updater->apply({R.value.data(), n}, {R.grad.data(), n}, 0, it);
      if (central_ && p > 1) colls_->broadcast(me, *R.c, R.value.data(), n, 0);
    } catch (const std::exception& e) {
      colls_->abort(static_cast<int>(r), e.what());
      throw;
    }
  }

  //! The finiteness decision on the devices' sum: replica r counts its 1/p
  //! slice (`part`, `count` floats of its device's memory) there, one host
  //! all-reduce of the counts (over every replica of every worker: each
  //! worker's slices cover the same sum once) decides for all.
  template <class Ctx>
  bool finite_on_device(Ctx& ctx, std::size_t r, const float* part, std::size_t count) {
    Replica& R = devs_[r];
    double local = 0;
    R.bad.resize(*R.c, Shape{1});
    R.c->upload(R.bad.data(), &local, sizeof local);
    R.c->count_nonfinite(part, count, R.bad.data());
    R.c->download(&local, R.bad.data(), sizeof local);
    float bad[1] = {static_cast<float>(local)};
    ctx.all_reduce(std::span<float>(bad), Sum);
    if (r == 0) this->bad_ = static_cast<double>(bad[0]) / this->workers_.size();
    return bad[0] == 0.f;
  }

  ExecutorOptions opts_;
  bool central_ = false;
  bool sharded_ = false;
  std::vector<Replica> devs_;
  std::unique_ptr<DeviceCollectives> colls_;
  std::unique_ptr<WorkerSum> workers_sum_;  // across workers (MultiWorkerMirroredStrategy), else null
  std::string choice_;
  mutable std::optional<Tensor<float>> host_;
};

}  // namespace strata::detail
