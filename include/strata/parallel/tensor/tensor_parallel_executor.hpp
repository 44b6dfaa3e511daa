#pragma once
//! Tensor parallelism (Megatron-LM's), an executor of Mirrored placement
//! chosen by ExecutorOptions::tensor_parallel = T: the strategy's R
//! replicas form R / T copies of the model, each split over T replicas
//! (replica r is member r % T of copy r / T). The model says what a member
//! holds (ModelProgram::tensor_layout); split layers sum their partial
//! results over their copy's members inside forward and backward
//! (TensorGroup); after backward each member sums its gradient with the same
//! member of the other copies (CopiesSum, tensor_peers.hpp) and updates
//! what it holds, or with ShardedUpdate::On its slice of the logical
//! parameters (logical_slices.hpp). State and checkpoints are logical.
//! parallel/tensor/README.md and docs/tensor-parallelism.md say the rest.
//!   strata::MirroredStrategy s{strata::cpu_replicas(4)};
//!   s.executor_options().tensor_parallel = 2;   // 2 copies of a model split over 2 replicas each

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/gradient/clip_norm.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/execution/device_executor.hpp>
#include <strata/execution/executor_options.hpp>
#include <strata/parallel/zero/logical_slices.hpp>
#include <strata/execution/state_slices.hpp>
#include <strata/execution/sync_executor.hpp>
#include <strata/device/tensor_group.hpp>
#include <strata/parallel/tensor/tensor_parallel_words.hpp>
#include <strata/parallel/tensor/tensor_peers.hpp>

namespace strata::detail {

template <class S>
class TensorParallelExecutor final : public SyncExecutor<S, TensorParallelExecutor<S>> {
  using Base = SyncExecutor<S, TensorParallelExecutor<S>>;
  friend Base;
  using Ctx = typename S::context_type;
  using Link = tensor_link_t<Ctx>;

 public:
  TensorParallelExecutor(S& s, ModelProgram& program, ExecutorOptions opts)
      : Base(s, program), opts_(opts), T_(opts.tensor_parallel) {}
  ~TensorParallelExecutor() override {
    this->reps_.clear();  // bound to the buffers below
    for (Replica& R : devs_) R.updater.reset();
  }

  //! What is split, over how many, and how the copies meet.
  [[nodiscard]] std::string collectives_choice() const override { return choice_; }

  void reset_optimizer() override {
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      Replica& R = devs_[r];
      R.updater.reset();
      R.copies.reset();  // the residual goes with the optimizer's state
      if (!this->program_.compiled()) continue;
      if (sharded_) R.updater = this->program_.make_updater(R.mine.size());  // its slice, on the host
      else R.updater = R.c ? this->program_.make_updater_on(*R.c, R.value.size()) : this->program_.make_updater(R.value.size());
    }
  }
  [[nodiscard]] bool state_reads_collective() const noexcept override { return sharded_ && this->workers_.size() > 1; }
  //! Logical: copy 0's members' states joined by their layouts; sharded,
  //! every replica's slice joined (across workers collective: every worker calls it).
  std::vector<Tensor<float>> optimizer_state() override {
    if (devs_.empty() || !devs_.front().updater) return {};
    if (sharded_) {
      std::vector<Range> slices;
      for (const Replica& R : devs_) slices.push_back(R.mine);
      return join_logical_slices(workers_comm(this->s_), this->program_.num_params(), std::span<const Range>(slices),
                                 [&](std::size_t l) { return devs_[l].updater->state(); });
    }
    std::vector<Tensor<float>> out;
    for (std::size_t t = 0; t < T_; ++t) {
      std::vector<Tensor<float>> mine = devs_[t].updater->state();
      if (out.empty())
        for (std::size_t i = 0; i < mine.size(); ++i) out.emplace_back(Shape{this->program_.num_params()});
      for (std::size_t i = 0; i < mine.size(); ++i) move_segments(layout_[t], out[i].span(), mine[i].span(), true);
    }
    return out;
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (devs_.empty() || !devs_.front().updater)
      throw Error("set_optimizer_state: the model is not compiled and placed yet");
    check_state_slots(slots, this->program_.num_params());
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      std::vector<Tensor<float>> mine;
      if (sharded_) mine = state_slice(slots, devs_[r].mine);
      else
        for (const Tensor<float>& s : slots) mine.push_back(shard_of(s, r % T_));
      devs_[r].updater->set_state(mine);
      devs_[r].copies.reset();  // not in checkpoints: a resumed run's residual starts at zero
    }
  }

  //! Copy 0's members' values joined (cached until they change).
  [[nodiscard]] const Tensor<float>& value() const override {
    if (!host_) {
      host_.emplace(Shape{this->program_.num_params()});
      for (std::size_t t = 0; t < T_ && t < devs_.size(); ++t) {
        const Replica& R = devs_[t];
        Tensor<float> mine{Shape{R.value.size()}};
        if (mine.size()) R.m->download(mine.data(), R.value.data(), mine.bytes());
        move_segments(layout_[t], host_->span(), mine.span(), true);
      }
    }
    return *host_;
  }
  void assign(const Tensor<float>& v) override {
    if (v.size() != this->program_.num_params())
      throw ShapeError("TensorParallelExecutor::assign: " + std::to_string(v.size()) + " values for " +
                       std::to_string(this->program_.num_params()) + " parameters");
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      const Tensor<float> mine = shard_of(v, r % T_);
      if (mine.size()) devs_[r].m->upload(devs_[r].value.data(), mine.data(), mine.bytes());
      const Range o = devs_[r].mine;  // sharded: the values of its logical slice, which it updates
      devs_[r].slice_v.assign(v.data() + o.begin, v.data() + o.end);
    }
    host_.reset();
  }

 private:
  struct Replica {
    std::unique_ptr<kernels::Compute> owned;  // a GPU's compute
    kernels::Compute* c = nullptr;            // that compute; null for a CPU replica
    kernels::Memory* m = nullptr;             // where its buffers live
    kernels::Buffer<float> value, grad;       // its shard (tensor_layout's elements)
    Tensor<float> host_grad;                  // a GPU's gradient on the host (the sums, the hook)
    CopiesSum copies;                         // its sum with its peers of the other copies (compressed or not)
    kernels::Buffer<double> scratch;          // clipping's
    std::unique_ptr<Updater> updater;
    std::vector<float> predictions;           // members other than 0 predict here (member 0 writes the batch's)
    Range mine;                               // sharded: its slice of the logical parameters
    std::vector<float> slice_v, slice_g;      // sharded: that slice's values and summed gradient
  };

  //! T divides the replicas of every worker: checked alike on every worker, from their counts.
  void check_workers(std::size_t local) const {
    std::vector<std::size_t> counts{local};
    if constexpr (requires { this->s_.local_replicas_of(0); }) {
      counts.clear();
      for (int w = 0; w < this->s_.num_workers(); ++w)
        counts.push_back(static_cast<std::size_t>(this->s_.local_replicas_of(w)));
    }
    check_tensor_counts(counts, T_);
  }

  //! Member t's elements of logical `v`.
  [[nodiscard]] Tensor<float> shard_of(const Tensor<float>& v, std::size_t t) const {
    Tensor<float> mine{Shape{segments_size(layout_[t])}};
    move_segments(layout_[t], std::span<float>(const_cast<float*>(v.data()), v.size()), mine.span(), false);
    return mine;
  }

  // -- SyncExecutor's hooks -------------------------------------------------
  void place_values(const Tensor<float>& init, std::size_t local) {
    this->reps_.clear();
    if (T_ < 1) throw Error("ExecutorOptions::tensor_parallel must be at least 1, got 0");
    check_workers(local);
    std::vector<std::vector<TensorSegment>> layout;
    for (std::size_t t = 0; t < T_; ++t) layout.push_back(this->program_.tensor_layout(static_cast<int>(t), static_cast<int>(T_)));
    layout_ = std::move(layout);
    for (Replica& R : devs_) R.updater.reset();
    devs_.clear();
    devs_.resize(local);
    const std::vector<Device>& devices = this->s_.devices();
    groups_.clear();
    const std::size_t D = static_cast<std::size_t>(this->s_.num_replicas_in_sync()) / T_;
    const int W = this->workers_.size();
    const std::size_t N = this->program_.num_params();
    sharded_ = opts_.sharded_update == ShardedUpdate::On;
    // buckets where the copies' sum travels, across workers (in one process the team would queue the members'
    // sends behind a started sum: docs/tensor-parallelism.md), the update not sharded
    plan_.clear();
    if constexpr (requires(Ctx& c, std::span<float> b) {
                    { c.all_reduce_async(b, Sum) } -> std::same_as<Work>;
                  })
      if (opts_.bucket_bytes && !sharded_ && W > 1)
        plan_ = plan_buckets(this->program_.variable_shapes(), opts_.bucket_bytes);
    for (std::size_t r = 0; r < local; ++r) {
      Replica& R = devs_[r];
      R.mine = logical_slice(N, static_cast<std::size_t>(W), static_cast<std::size_t>(this->workers_.index()), local, r);
      R.slice_v.assign(init.data() + R.mine.begin, init.data() + R.mine.end);
      if (devices[r].is_gpu()) R.owned = make_compute(devices[r], opts_.matmul);
      R.c = R.owned.get();
      R.m = R.c ? static_cast<kernels::Memory*>(R.c) : &kernels::host_memory();
      const Tensor<float> mine = shard_of(init, r % T_);
      R.value.resize(*R.m, Shape{mine.size()});
      R.grad.resize(*R.m, Shape{mine.size()});
      if (mine.size()) R.m->upload(R.value.data(), mine.data(), mine.bytes());
      R.m->fill(R.grad.data(), 0.f, mine.size());
      // compressed where the copies' sum runs: its member's elements, or (across workers, sharded) the logical gradient
      R.copies.place(opts_.compression, W > 1 || sharded_ ? N : mine.size());
      std::vector<int> members;
      for (std::size_t t = 0; t < T_; ++t) members.push_back(static_cast<int>((r / T_) * T_ + t));
      groups_.push_back(std::make_unique<PeerTensorGroup<Link>>(std::move(members), r % T_));
    }
    choice_ = describe_tensor_copies({.split = this->program_.describe_tensor_split(static_cast<int>(T_)), .copies = D,
                                      .replicas = D * T_, .workers = W, .sharded = sharded_, .buckets = plan_.size(),
                                      .bucket_bytes = opts_.bucket_bytes, .params = N, .compression = opts_.compression});
    host_.reset();
  }
  std::unique_ptr<ReplicaProgram> make_replica(std::size_t r) {
    Replica& R = devs_[r];
    const std::size_t n = R.value.size();
    return this->program_.make_tensor_replica_on(R.c, static_cast<int>(r % T_), static_cast<int>(T_),
                                                 {R.value.data(), n}, {R.grad.data(), n});
  }
  //! fn(replica r's gradient, its shard's layout, on the host).
  template <class F>
  void with_host_gradient(std::size_t r, F&& fn) {
    Replica& R = devs_[r];
    const std::size_t n = R.grad.size();
    if (!R.c) return fn(std::span<float>(R.grad.data(), n));
    with_host_copy(*R.m, R.grad.data(), n, R.host_grad, fn);
  }
  void before_step(std::size_t r) {
    devs_[r].m->bind_thread();
    if (r == 0) host_.reset();
  }
  //! The copies split the batch; a copy's members all take its rows.
  [[nodiscard]] Range rows_for(const Batch& b, std::size_t global, bool own, std::size_t p, std::size_t r,
                               int g) const {
    const std::size_t copies = p / T_, copy = (own ? r : static_cast<std::size_t>(g)) / T_;
    return own ? shard_range(b.x->shape()[0], copies, copy) : shard_range(global, copies, copy);
  }
  //! A copy's loss and metrics once: its member 0's.
  [[nodiscard]] bool counts(std::size_t r) const noexcept { return r % T_ == 0; }
  //! Members other than 0 predict into their own buffer (member 0 writes the copy's rows).
  Batch batch_for(const Batch& b, std::size_t r, std::size_t global) {
    if (!b.predictions || r % T_ == 0) return b;
    Batch mine = b;
    devs_[r].predictions.resize(global * this->program_.output_width());
    mine.predictions = devs_[r].predictions.data();
    return mine;
  }
  //! Dropout masks keyed by the copy (a copy's members agree), L2 shared by the copies, the group bound.
  void adjust_step(Ctx& ctx, StepInfo& info, std::size_t r) {
    info.replica = static_cast<int>(static_cast<std::size_t>(info.replica) / T_);
    info.replicas = static_cast<int>(static_cast<std::size_t>(info.replicas) / T_);
    groups_[r]->bind(tensor_link(ctx));
    info.tensor_group = groups_[r].get();
  }

  //! Replica r's buckets for this step (ExecutorOptions::bucket_bytes, across workers, unsharded), unless a
  //! custom loop's hook must see the whole gradient first: its copies' sum started as backward ends each.
  GradientReady* ready_for(Ctx& ctx, std::size_t r, const Pass& pass) {
    if (plan_.empty() || pass.gradient_hook) return nullptr;
    Replica& R = devs_[r];
    LogicalBuckets::Fetch fetch;  // a GPU's gradient: to the host range by range, as backward tells it
    if (R.c) fetch = [&R](std::size_t b, std::size_t e) { R.m->download(R.host_grad.data() + b, R.grad.data() + b, (e - b) * sizeof(float)); };
    return R.copies.begin_buckets(ctx, &plan_, layout_[r % T_], r % T_, host_view(R), this->program_.num_params(),
                                  std::move(fetch));
  }
  //! Where replica R's gradient is read on the host: a CPU's own buffer, a GPU's host copy (sized here).
  std::span<float> host_view(Replica& R) {
    if (!R.c) return {R.grad.data(), R.grad.size()};
    if (R.host_grad.size() != R.grad.size()) R.host_grad = Tensor<float>(Shape{R.grad.size()});
    return R.host_grad.span();
  }
  //! A step failed: its buckets in flight are forgotten.
  void after_failure() { for (Replica& R : devs_) R.copies.drop(); }

  //! The copies' sum of member t's gradient, the checks over the whole model, the update of what it holds
  //! (sharded, ZeRO 1: the members' parts of the logical gradient reduce-scattered over every replica, the
  //! sums unsharded's; each replica checks and updates its slice; the slices all-gathered, each takes its part).
  template <class C>
  void apply(C& ctx, std::size_t r, std::int64_t it) {
    Replica& R = devs_[r];
    const std::size_t t = r % T_, n = R.value.size();
    const std::size_t copy = static_cast<std::size_t>(ctx.replica_id_in_sync_group()) / T_;  // global
    const std::span<float> g{R.grad.data(), n};
    const std::span<float> hg = host_view(R);  // the gradient in host memory (by buckets: a GPU's fetched as told)
    if (R.c && n && !R.copies.buckets_active()) R.m->download(hg.data(), g.data(), n * sizeof(float));
    if constexpr (SlicingContext<C>) {
      if (sharded_) {
        std::vector<float>& all = R.copies.logical(this->program_.num_params());
        move_segments(layout_[t], all, hg, true, t == 0);
        R.slice_g.resize(R.mine.size());
        R.copies.scattered(ctx, std::span<const float>(all), std::span<float>(R.slice_g));
        if (!checked(ctx, r, std::span<float>(R.slice_g), [&](auto&& f) { f(std::span<const float>(R.slice_g)); }))
          return;
        R.copies.commit();
        if (R.updater) R.updater->apply(R.slice_v, R.slice_g, 0, it);
        slices_gather(ctx, std::span<const float>(R.slice_v), std::span<float>(all));
        // its part of the values: a CPU's in place, a GPU's staged where its gradient was
        move_segments(layout_[t], all, R.c ? hg : std::span<float>(R.value.data(), n), false);
        if (R.c && n) R.m->upload(R.value.data(), hg.data(), n * sizeof(float));
        return;
      }
    }
    std::vector<int> peers;  // member t of every copy (in one process: local ids are global)
    const std::size_t D = static_cast<std::size_t>(ctx.num_replicas_in_sync()) / T_;  // copies, all workers
    for (std::size_t d = 0; d < D; ++d) peers.push_back(static_cast<int>(d * T_ + t));
    if (R.copies.buckets_active()) R.copies.finish_buckets(layout_[t], hg);  // (CPU: hg is its gradient)
    else
      R.copies.sum(ctx, tensor_link(ctx), peers, copy, this->workers_.size() > 1, layout_[t], t,
                   this->program_.num_params(), hg);
    // what this replica counts of the model: copy 0's members, their own elements, member 0 the replicated ones too
    auto each_counted = [&](auto&& f) {
      if (copy != 0) return;
      std::size_t at = 0;
      for (const TensorSegment& s : layout_[t]) {
        if (!s.replicated || t == 0) f(hg.subspan(at, s.length));
        at += s.length;
      }
    };
    if (!checked(ctx, r, hg, each_counted)) return;  // (the residual as it was)
    R.copies.commit();
    if (R.c && n) R.m->upload(g.data(), hg.data(), n * sizeof(float));
    if (R.updater) R.updater->apply({R.value.data(), n}, g, 0, it);
  }

  //! The finiteness count and the squared norm over what `each(f)` visits
  //! (f on spans: what replica r counts, each element of the model counted by
  //! one replica), each one float all-reduced; `g` scaled when clipping.
  //! False: the step is skipped (on every replica alike).
  template <class C, class Each>
  bool checked(C& ctx, std::size_t r, std::span<float> g, Each&& each) {
    Replica& R = devs_[r];
    if (this->check_) {
      double local = 0;
      each([&](std::span<const float> x) { kernels::host_memory().count_nonfinite(x.data(), x.size(), &local); });
      float bad[1] = {static_cast<float>(local)};
      ctx.all_reduce(std::span<float>(bad), Sum);
      this->seen_bad_[r] = bad[0];
      if (r == 0) this->bad_ = bad[0];
      if (bad[0] != 0.f) return false;
    }
    const float clipnorm = R.updater ? R.updater->global_clipnorm() : 0.f;
    if (clipnorm > 0.f) {
      double sq[1] = {0.0};
      each([&](std::span<const float> x) { sq[0] += square_sum_in(nullptr, x, R.scratch); });
      ctx.all_reduce(std::span<double>(sq), Sum);
      clip_in(nullptr, g, sq[0], clipnorm, R.scratch);
    }
    return true;
  }

  ExecutorOptions opts_;
  std::size_t T_ = 1;
  bool sharded_ = false;  // ShardedUpdate::On: ZeRO 1 over the logical parameters
  std::vector<Range> plan_;   // the gradient buckets over the logical gradient (empty: a flat sum)
  std::vector<std::vector<TensorSegment>> layout_;  // per member: what it holds
  std::vector<Replica> devs_;
  std::vector<std::unique_ptr<PeerTensorGroup<Link>>> groups_;  // per replica: its copy's members
  std::string choice_;
  mutable std::optional<Tensor<float>> host_;
};

}  // namespace strata::detail
