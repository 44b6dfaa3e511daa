#pragma once
//! The executor of Mirrored placement (and OneDevice on a CPU), on any
//! compute: CPU replicas, GPU replicas, in one process or as the local
//! replicas of one worker among several. Every local replica keeps its copy
//! of the variables, its gradient, its optimizer state and its activations
//! in its compute's memory (the host's for a CPU, its own device's for a
//! GPU); the synchronous loop (sync_executor.hpp) hands each replica its
//! rows of the global batch, the gradients are summed in replica order and
//! every copy gets the same update. p replicas thus take the step one
//! replica takes on the whole batch.
//!   strata::MirroredStrategy s{strata::cpu_replicas(4)};
//!   strata::MirroredStrategy g{strata::virtual_gpus(0, 4)};   // 4 replicas on GPU 0
//!   s.executor_options().sharded_update = strata::ShardedUpdate::Off;   // before making the model
//!
//! The one step (apply) is written once, against a replica's collectives
//! (`coll`: all_reduce, reduce_scatter, all_gather, broadcast of spans in
//! its compute's memory):
//! - CPU replicas: the replica context itself (the strategy's reduce policy
//!   and communicator; across workers its all-reduce is hierarchical);
//! - GPU replicas: DeviceStep (worker_sum.hpp), over DeviceCollectives (device_collectives.hpp:
//!   a reduce kernel among virtual GPUs or GPUs with peer access, NCCL
//!   between distinct GPUs, else staged through host memory) and, across
//!   workers, WorkerSum (worker_sum.hpp: local sum on the devices, replica 0
//!   sums across workers, the others take its result).
//! The finiteness decision (Pass::finite) counts each replica's 1/p slice
//! of the sum on its compute and one host all-reduce of a float decides for
//! every replica of every worker (SyncExecutor::finite_gradient); clipping
//! by the global norm sums the squares of the same slices in one more
//! all-reduce (SyncExecutor::clip_gradient; sharded, each replica scales its slice).
//! Sharded update (ZeRO stage 1, which TensorFlow's MirroredStrategy does
//! not have; ShardedUpdate, Auto from 3 replicas in one process, On also
//! across workers over every worker's replicas: logical_slices.hpp): the
//! gradients are reduce-scattered, each replica updates its 1/p slice with
//! its 1/p of the optimizer state, the updated slices are all-gathered into
//! every copy: the same sums, so bitwise the unsharded update's weights with
//! the direct all-reduce, and the optimizer state divided by p.
//! Central (CentralStorageStrategy with CentralVariables::Gpu): only replica
//! 0 keeps optimizer state and applies the update to its copy, the central
//! one; the others take its values each step.
//! Gradient buckets (ExecutorOptions::bucket_bytes, buckets.hpp) cut the all-reduce above, on
//! CPU and GPU replicas; compression (ExecutorOptions::compression, compression.hpp) sends it (or ZeRO 1's
//! reduce-scatter) in 16 bits, on CPU and GPU replicas (a GPU rounds on its compute and sums in its collectives).
//! On the host's compute substituted for a GPU's (tests/device/host_as_gpu.hpp)
//! the GPU replicas run this very code and give the CPU run's bits.

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/policy/placement.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/device/device_collectives.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/execution/device_executor.hpp>
#include <strata/execution/executor_options.hpp>
#include <strata/parallel/zero/fully_sharded_executor.hpp>
#include <strata/parallel/zero/logical_slices.hpp>
#include <strata/execution/sync_executor.hpp>
#include <strata/parallel/tensor/tensor_parallel_executor.hpp>
#include <strata/device/worker_sum.hpp>

namespace strata {

namespace detail {

template <class S>
class MirroredExecutor final : public SyncExecutor<S, MirroredExecutor<S>> {
  using Base = SyncExecutor<S, MirroredExecutor<S>>;
  friend Base;

 public:
  //! `central`: the update on replica 0 only, its values broadcast (CentralVariables::Gpu).
  MirroredExecutor(S& s, ModelProgram& program, ExecutorOptions opts, bool central = false)
      : Base(s, program), opts_(opts), central_(central) {}
  // The replicas' programs and updaters hold memory of the computes: they go first.
  ~MirroredExecutor() override {
    this->reps_.clear();
    workers_sum_.reset();  // may hold an NCCL communicator on replica 0's stream
    for (Replica& R : devs_) R.updater.reset();
  }

  //! GPU replicas: which all-reduce the local replicas use, and why (and,
  //! across workers, how their sums cross workers). CPU replicas: empty
  //! (the strategy's reduce policy decides).
  [[nodiscard]] std::string collectives_choice() const override { return choice_; }

  void reset_optimizer() override {
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      Replica& R = devs_[r];
      R.updater.reset();
      R.comp.reset();  // the residual goes with the optimizer's state
      if (!this->program_.compiled() || !updates(r)) continue;
      const std::size_t n = sharded_ ? mine(r).size() : this->program_.num_params();
      R.updater = R.c ? this->program_.make_updater_on(*R.c, n) : this->program_.make_updater(n);
    }
  }
  [[nodiscard]] bool state_reads_collective() const noexcept override { return sharded_ && this->workers_.size() > 1; }
  //! Replica 0's (every replica's is the same); sharded, every replica's slice of it (across workers
  //! collective: every worker calls it).
  std::vector<Tensor<float>> optimizer_state() override {
    if (devs_.empty() || !devs_.front().updater) return {};
    if (!sharded_) return devs_.front().updater->state();
    std::vector<Range> slices;
    for (std::size_t r = 0; r < devs_.size(); ++r) slices.push_back(mine(r));
    return join_logical_slices(workers_comm(this->s_), this->program_.num_params(), std::span<const Range>(slices),
                               [&](std::size_t r) { return devs_[r].updater->state(); });
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (devs_.empty() || !devs_.front().updater)
      throw Error("set_optimizer_state: the model is not compiled and placed yet");
    check_state_slots(slots, this->program_.num_params());
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      devs_[r].comp.reset();  // not in checkpoints: a resumed run's residual starts at zero
      if (!devs_[r].updater) continue;
      if (sharded_) devs_[r].updater->set_state(state_slice(slots, mine(r)));
      else devs_[r].updater->set_state(slots);
    }
  }
  //! Whether the update is sharded over the replicas (decided when the variables are placed).
  [[nodiscard]] bool sharded() const noexcept { return sharded_; }

  //! Replica 0's copy, read from its compute's memory (cached until it changes).
  [[nodiscard]] const Tensor<float>& value() const override {
    if (!host_) {
      host_.emplace(Shape{this->program_.num_params()});
      if (host_->size() && !devs_.empty()) devs_.front().m->download(host_->data(), devs_.front().value.data(), host_->bytes());
    }
    return *host_;
  }
  void assign(const Tensor<float>& v) override {
    if (v.size() != this->program_.num_params())
      throw ShapeError("MirroredExecutor::assign: " + std::to_string(v.size()) + " values for " +
                       std::to_string(this->program_.num_params()) + " parameters");
    for (Replica& R : devs_)
      if (v.size()) R.m->upload(R.value.data(), v.data(), v.bytes());
    host_.reset();
  }

 private:
  struct Replica : ReplicaDevice {  // its compute (a GPU's) and memory, then its buffers there
    kernels::Buffer<float> value, grad;
    kernels::Buffer<float> shard;  // sharded update: its slice of the summed gradient, then of the updated values
    kernels::Buffer<double> bad;   // its finiteness count
    kernels::Buffer<double> norm;  // its squared norm for clipping (a GPU's, in its memory)
    Tensor<float> host_grad;       // a GPU's gradient on the host, for a custom loop's hook
    GradientCompression comp;      // ExecutorOptions::compression: its residual and 16-bit gradient, in its memory
    std::optional<DeviceStep> step;  // a GPU's collectives of this step (its buckets' sums refer to it)
    std::unique_ptr<Updater> updater;
  };

  //! CPU replicas' contexts reduce-scatter and all-gather over every replica (across workers too).
  static constexpr bool context_shards = SlicingContext<typename S::context_type>;

  //! Whether replica r applies the update (every one, or only the central one).
  [[nodiscard]] bool updates(std::size_t r) const noexcept { return !central_ || r == 0; }
  //! Replica r's slice of the parameters (the sharded update's, the finiteness count's): of the
  //! logical vector over every worker's replicas when the update is sharded across workers.
  [[nodiscard]] Range mine(std::size_t r) const {
    const bool all = sharded_ && this->workers_.size() > 1;
    return logical_slice(this->program_.num_params(), all ? static_cast<std::size_t>(this->workers_.size()) : 1,
                         all ? static_cast<std::size_t>(this->workers_.index()) : 0, devs_.size(), r);
  }
  [[nodiscard]] bool on_gpus() const { return this->s_.devices().front().is_gpu(); }
  //! The optimizer's global_clipnorm (replica 0 always updates; 0: none).
  [[nodiscard]] float clipnorm() const {
    return devs_.empty() || !devs_.front().updater ? 0.f : devs_.front().updater->global_clipnorm();
  }

  // -- SyncExecutor's hooks -------------------------------------------------
  void place_values(const Tensor<float>& init, std::size_t local) {
    this->reps_.clear();  // bound to the buffers below
    if (devs_.size() != local) make_replicas(local);
    if (colls_) colls_->reset();
    for (Replica& R : devs_) {
      R.comp.place(opts_.compression, init.size(), R.c);
      R.value.resize(*R.m, Shape{init.size()});
      R.grad.resize(*R.m, Shape{init.size()});
      if (init.size()) R.m->upload(R.value.data(), init.data(), init.bytes());
      R.m->fill(R.grad.data(), 0.f, init.size());
    }
    for (std::size_t r = 0; r < devs_.size(); ++r)
      if (sharded_) devs_[r].shard.resize(*devs_[r].m, Shape{mine(r).size()});
    if (!on_gpus())  // the stages that fit are counted over every worker's replicas (each shards the job's state)
      check_model_state_budget(opts_.memory_budget_bytes, sharded_ ? 1 : 0, init.size(),
                               static_cast<std::size_t>(this->s_.num_replicas_in_sync()), this->program_,
                               opts_.compression != Compression::None);
    plan_.clear();
    if (opts_.bucket_bytes) plan_ = plan_buckets(this->program_.variable_shapes(), opts_.bucket_bytes);
    buckets_ = std::vector<GradientBuckets>(local);
    host_.reset();
  }
  //! The local replicas' computes and collectives, and whether the update is sharded.
  void make_replicas(std::size_t local) {
    workers_sum_.reset();
    for (Replica& R : devs_) R.updater.reset();
    devs_.clear();
    devs_.resize(local);
    colls_.reset();
    choice_.clear();
    const std::vector<Device>& devices = this->s_.devices();
    const bool gpus = on_gpus();
    for (std::size_t r = 0; r < local; ++r) devs_[r].place_on(devices[r], opts_.matmul);
    // sharded in one process, from 3 replicas unless told; across workers when told (On), over every
    // worker's replicas (GPU replicas staged through host memory to the replica context's collectives)
    const bool one = this->workers_.size() == 1;
    const auto p = static_cast<std::size_t>(this->s_.num_replicas_in_sync());
    sharded_ = !central_ && (gpus ? one || ShardingContext<typename S::context_type> : context_shards) &&
               (one ? shards_update(opts_.sharded_update, local) : opts_.sharded_update == ShardedUpdate::On && p > 1);
    this->slices_span_workers_ = sharded_ && !one;  // each replica counts its slice of the job's
    if (!sharded_ && !central_ && p > 1 && opts_.sharded_update == ShardedUpdate::On)
      throw Error("ShardedUpdate::On (ZeRO 1): these replicas' contexts cannot reduce-scatter and all-gather over "
                  "every replica; use ShardedUpdate::Off or Auto");
    if (!gpus) return;
    colls_ = make_device_collectives(devices, this->s_.options());
    choice_ = colls_->choice() + gpu_update_words(sharded_ ? (one ? local : p) : 0, !one, central_, opts_.compression);
    if constexpr (requires { this->s_.make_worker_sum(*devs_.front().c); })
      if (this->workers_.size() > 1) {  // collective over the workers, as place() is
        workers_sum_ = this->s_.make_worker_sum(*devs_.front().c);
        choice_ += "; across workers: " + workers_sum_->choice();
      }
  }
  std::unique_ptr<ReplicaProgram> make_replica(std::size_t r) {
    const std::size_t n = this->program_.num_params();
    Replica& R = devs_[r];
    if (!R.c) return this->program_.make_replica({R.value.data(), n}, {R.grad.data(), n});
    return this->program_.make_replica_on(*R.c, {R.value.data(), n}, {R.grad.data(), n});
  }
  //! fn(replica r's gradient on the host): a GPU's is copied there and back.
  template <class F>
  void with_host_gradient(std::size_t r, F&& fn) {
    Replica& R = devs_[r];
    const std::size_t n = this->program_.num_params();
    if (!R.c) return fn(std::span<float>(R.grad.data(), n));
    with_host_copy(*R.m, R.grad.data(), n, R.host_grad, fn);
  }
  void before_step(std::size_t r) {
    devs_[r].m->bind_thread();  // this pool thread issues replica r's calls: its GPU current
    if (r == 0) host_.reset();  // the cached value may change (only replica 0's thread touches it in a run)
  }
  //! Replica r failed (in its step or its update): the others stop waiting
  //! for it in the device collectives at once (the replica context's are
  //! released by the strategy's run).
  void replica_failed(std::size_t r, const std::string& why) {
    if (colls_) colls_->abort(static_cast<int>(r), why);
  }
  //! A step failed: let every device finish what was queued (a collective's
  //! kernels may still touch a failed replica's buffers), then forget the
  //! collectives' state so that the next step starts clean.
  void after_failure() {
    for (GradientBuckets& B : buckets_) B.drop();
    for (Replica& R : devs_) R.quiesce();
    if (colls_) colls_->reset();
  }

  //! Replica r's buckets for this step, where they apply: CPU replicas whose context starts an
  //! all-reduce without waiting (compressed with their gradient), and GPU replicas (the device
  //! collectives' started sum: DeviceStep::all_reduce_async). Flat instead with the sharded update
  //! (its reduce-scatter is cut by replica, not by bucket) or central variables, and when a custom
  //! loop's hook must see the whole gradient before any of it is reduced.
  template <class Ctx>
  GradientReady* ready_for(Ctx& ctx, std::size_t r, const Pass& pass) {
    if (opts_.bucket_bytes == 0 || sharded_ || central_ || pass.gradient_hook || plan_.empty()) return nullptr;
    Replica& R = devs_[r];
    const std::span<float> g{R.grad.data(), this->program_.num_params()};
    if (colls_) {  // compressed: rounded on the GPU, summed in 16 bits by the device collectives
      DeviceStep& step = R.step.emplace(DeviceStep{*colls_, workers_sum_.get(), *R.c, r, devs_.size()});
      buckets_[r].begin(&plan_, g, R.comp.bucket_start(step, g), R.comp.bucket_done(g));
      return &buckets_[r];
    }
    if constexpr (requires(std::span<float> b) {
                    { ctx.all_reduce_async(b, Sum) } -> std::same_as<Work>;
                  }) {
      buckets_[r].begin(&plan_, g, R.comp.bucket_start(ctx, g), R.comp.bucket_done(g));
      return &buckets_[r];
    }
    return nullptr;
  }

  template <class Ctx>
  void apply(Ctx& ctx, std::size_t r, std::int64_t it) {
    if constexpr (ShardingContext<Ctx>)
      if (colls_ && this->slices_span_workers_) {  // GPU replicas sharded across workers (only with such contexts)
        StagedContext<Ctx> staged{ctx, *devs_[r].c};
        return update(ctx, staged, r, it);
      }
    if (colls_) {
      DeviceStep step{*colls_, workers_sum_.get(), *devs_[r].c, r, devs_.size()};
      update(ctx, step, r, it);
    } else {
      update(ctx, ctx, r, it);
    }
  }

  //! The step's reduction and update on replica r, over its collectives `coll`.
  template <class Ctx, class Coll>
  void update(Ctx& ctx, Coll& coll, std::size_t r, std::int64_t it) {
    Replica& R = devs_[r];
    const std::size_t n = this->program_.num_params();
    const std::span<float> w{R.value.data(), n}, g{R.grad.data(), n};
    if (sharded_) {
      // a skipped step leaves every slice (and the residual) as it was
      auto step = [&](auto& c) {
        sharded_update(c, *R.m, w, g, {R.shard.data(), mine(r).size()}, mine(r),
                       [&](std::span<float> ws, std::span<const float> gs) {
                         if (!this->finite_gradient(ctx, r, *R.m, R.bad, gs)) return false;
                         R.comp.commit();
                         this->clip_gradient(ctx, R.c, R.norm, gs, {R.shard.data(), gs.size()}, clipnorm());
                         R.updater->apply(ws, gs, 0, it);
                         return true;
                       });
      };
      auto run = [&](auto& c) {  // compressed: the reduce-scatter in 16 bits
        if constexpr (requires(std::span<const bf16> i, std::span<bf16> o) { c.reduce_scatter(i, o, Sum); })
          if (R.comp.on()) {
            CompressedSlices<std::remove_reference_t<decltype(c)>> z{c, R.comp};
            return step(z);
          }
        step(c);
      };
      if constexpr (requires(std::span<const float> in, std::span<float> out) {
                      coll.reduce_scatter(in, out, Sum);
                      coll.all_gather(in, out);
                    })
        return run(coll);
      else if constexpr (SlicingContext<Coll>) {
        SliceCollectives<Coll> c{coll};
        return run(c);
      }
    }
    if (!buckets_.empty() && buckets_[r].active()) buckets_[r].finish();  // the same sums, bucket by bucket
    else R.comp.all_reduce(coll, g);  // FP32, or compressed (16 bits on the wire)
    const std::span<const float> part = std::span<const float>(g).subspan(mine(r).begin, mine(r).size());
    if (!this->finite_gradient(ctx, r, *R.m, R.bad, part)) return;  // a skipped step keeps the residual it had
    R.comp.commit();
    this->clip_gradient(ctx, R.c, R.norm, part, updates(r) ? g : std::span<float>{}, clipnorm());
    if (updates(r)) R.updater->apply(w, g, 0, it);
    if constexpr (requires { coll.broadcast(w, 0); })
      if (central_ && devs_.size() > 1) coll.broadcast(w, 0);
  }

  ExecutorOptions opts_;
  bool central_ = false;
  bool sharded_ = false;
  std::vector<Replica> devs_;
  std::unique_ptr<DeviceCollectives> colls_;  // GPU replicas; CPU replicas use their replica context
  std::unique_ptr<WorkerSum> workers_sum_;    // GPU replicas across workers, else null
  std::string choice_;
  std::vector<Range> plan_;                // the gradient buckets (empty: bucket_bytes 0 or no parameters)
  std::vector<GradientBuckets> buckets_;   // per local replica
  mutable std::optional<Tensor<float>> host_;
};

//! Mirrored: one executor for CPU and GPU replicas, in one process and across workers.
template <>
struct ExecutorFor<Mirrored> {
  template <class S>
  static std::unique_ptr<Executor> make(S& s, ModelProgram& program) {
    if (auto ex = make_tensor_parallel(s, program)) return ex;  // parallel/tensor/tensor_parallel_executor.hpp
    if (auto ex = make_fully_sharded(s, program)) return ex;  // ZeRO 2 and 3 (parallel/zero/fully_sharded_executor.hpp)
    return std::make_unique<MirroredExecutor<S>>(s, program, s.executor_options());
  }
};
//! One device: on a CPU, a mirrored executor of one replica; on a GPU, the
//! device executor (everything in the GPU's memory, on the caller's thread:
//! execution/device_executor.hpp).
template <>
struct ExecutorFor<OneDevice> {
  template <class S>
  static std::unique_ptr<Executor> make(S& s, ModelProgram& program) {
    const Device& d = s.devices().front();
    if (d.is_gpu())
      return std::make_unique<DeviceExecutor>(program, make_compute(d, s.executor_options().matmul),
                                              s.executor_options());
    return ExecutorFor<Mirrored>::make(s, program);
  }
};

}  // namespace detail
}  // namespace strata
