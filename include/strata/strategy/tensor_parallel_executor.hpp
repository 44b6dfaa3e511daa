#pragma once
//! Tensor parallelism (Megatron-LM's), an executor of Mirrored placement
//! chosen by ExecutorOptions::tensor_parallel = T: the strategy's R
//! replicas form R / T data-parallel copies of the model, each split over T
//! replicas (replica r is member r % T of copy r / T). The model says what a
//! member holds (ModelProgram::tensor_layout: every attention layer's heads
//! split, with their columns of the qkv projection and rows of the output
//! projection; each MLP pair of Dense layers split column then row; the
//! rest whole on every member); the split layers sum their partial results
//! over their copy's members inside forward and backward (TensorGroup:
//! one all-reduce after each row-parallel product, one for the input's
//! gradient of each column-parallel one). Every member of a copy gets the
//! copy's rows of the global batch (the copies split it as mirrored
//! replicas do); after backward each member sums its gradient with the same
//! member of the other copies, and updates what it holds with its own
//! optimizer state: a member's optimizer state is 1/T of the split layers'
//! (and the whole of the others'). The finiteness check and clipping by the
//! global norm count each element of the model once (member 0 of copy 0
//! counts the replicated parameters).
//! The values, the optimizer state and checkpoints are logical: value()
//! joins the members' shards, assign() and set_optimizer_state() split a
//! logical vector, so a model trained at T = 2 continues at T = 1 or 4.
//! Collectives: both sums are strata's own over the replica contexts'
//! tagged send / recv (every member adds the members' buffers in member
//! order: the same bits on each, and a run repeats bitwise), bounded by the
//! communicator's deadline, a failed replica releasing the others.
//! Against one replica: equal to float rounding, not bitwise (a split
//! product adds its partial sums in another order).
//!   strata::MirroredStrategy s{strata::cpu_replicas(4)};
//!   s.executor_options().tensor_parallel = 2;   // 2 copies of a model split over 2 replicas each
//! Across workers (MultiWorkerMirroredStrategy under mpirun) a copy's
//! members are replicas of one worker, as Megatron keeps a tensor group
//! within a node: its two sums per block move activations, too many bytes
//! for a link between hosts. T must divide every worker's replicas; the
//! copies' gradient sum then crosses workers in one all-reduce of the
//! logical gradient, each replica contributing its member's part at its
//! place and zeros elsewhere (member 0 the replicated parameters): each
//! element is the sum over the copies, added in one order for every
//! member. CPU or GPU replicas (a GPU's buffers go through host memory for
//! the sums). Compression (ExecutorOptions::compression, compression.hpp)
//! sends each member's gradient to the copies' sum in 16 bits, with error
//! feedback, on CPU and GPU replicas alike (the sum runs on the host).

#include <algorithm>
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
#include <strata/strategy/clip_norm.hpp>
#include <strata/strategy/compression.hpp>
#include <strata/strategy/device_compute.hpp>
#include <strata/strategy/device_executor.hpp>
#include <strata/strategy/executor_options.hpp>
#include <strata/strategy/state_slices.hpp>
#include <strata/strategy/sync_executor.hpp>
#include <strata/strategy/tensor_group.hpp>
#include <strata/strategy/tensor_peers.hpp>

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
      R.comp.reset();  // the residual goes with the optimizer's state
      if (!this->program_.compiled()) continue;
      R.updater = R.c ? this->program_.make_updater_on(*R.c, R.value.size()) : this->program_.make_updater(R.value.size());
    }
  }
  //! Logical: copy 0's members' states joined by their layouts.
  std::vector<Tensor<float>> optimizer_state() override {
    if (devs_.empty() || !devs_.front().updater) return {};
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
      for (const Tensor<float>& s : slots) mine.push_back(shard_of(s, r % T_));
      devs_[r].updater->set_state(mine);
      devs_[r].comp.reset();  // not in checkpoints: a resumed run's residual starts at zero
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
    std::vector<float> in;                    // peer_sum's scratch (across workers: the logical gradient)
    GradientCompression comp;                 // ExecutorOptions::compression: its residual, its 16-bit gradient
    std::vector<bf16> in_bf;                  // peer_sum's scratch, compressed
    std::vector<fp16> in_fp;
    kernels::Buffer<double> scratch;          // clipping's
    std::unique_ptr<Updater> updater;
    std::vector<float> predictions;           // members other than 0 predict here (member 0 writes the batch's)
  };

  //! T divides the replicas of every worker (a copy's members are one
  //! worker's): checked alike on every worker, from their counts.
  void check_workers(std::size_t local) const {
    std::vector<std::size_t> counts{local};
    if constexpr (requires { this->s_.local_replicas_of(0); }) {
      counts.clear();
      for (int w = 0; w < this->s_.num_workers(); ++w)
        counts.push_back(static_cast<std::size_t>(this->s_.local_replicas_of(w)));
    }
    for (std::size_t w = 0; w < counts.size(); ++w)
      if (counts[w] % T_ != 0)
        throw Error("ExecutorOptions::tensor_parallel = " + std::to_string(T_) + " does not divide the " +
                    std::to_string(counts[w]) + " replicas" +
                    (counts.size() > 1 ? " of worker " + std::to_string(w) : std::string()) +
                    ": each copy of the model takes " + std::to_string(T_) + " replicas" +
                    (counts.size() > 1 ? " of one worker (its sums inside forward and backward stay within a "
                                         "worker, as Megatron keeps a tensor group within a node)"
                                       : std::string()) +
                    "; give a multiple of " + std::to_string(T_) + " replicas" +
                    (counts.size() > 1 ? " per worker" : ""));
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
    for (std::size_t r = 0; r < local; ++r) {
      Replica& R = devs_[r];
      if (devices[r].is_gpu()) R.owned = make_compute(devices[r], opts_.matmul);
      R.c = R.owned.get();
      R.m = R.c ? static_cast<kernels::Memory*>(R.c) : &kernels::host_memory();
      const Tensor<float> mine = shard_of(init, r % T_);
      R.value.resize(*R.m, Shape{mine.size()});
      R.grad.resize(*R.m, Shape{mine.size()});
      if (mine.size()) R.m->upload(R.value.data(), mine.data(), mine.bytes());
      R.m->fill(R.grad.data(), 0.f, mine.size());
      // compressed where the copies' sum runs: its member's elements, or (across workers) the logical gradient
      R.comp.place(opts_.compression, W > 1 ? this->program_.num_params() : mine.size());
      std::vector<int> members;
      for (std::size_t t = 0; t < T_; ++t) members.push_back(static_cast<int>((r / T_) * T_ + t));
      groups_.push_back(std::make_unique<PeerTensorGroup<Link>>(std::move(members), r % T_));
    }
    choice_ = this->program_.describe_tensor_split(static_cast<int>(T_)) + "; " + std::to_string(D) +
              (D == 1 ? " copy" : " data-parallel copies, each member's gradient summed with its peers'") +
              (W > 1 ? " (across " + std::to_string(W) + " workers: one all-reduce of the members' parts)" : "");
    if (opts_.compression != Compression::None)
      choice_ += std::string("; each member's gradient rounded to ") + std::string(to_string(opts_.compression)) +
                 " for the copies' sum (error feedback: what the rounding lost added to its next step's)";
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
    info.ready = nullptr;
    groups_[r]->bind(tensor_link(ctx));
    info.tensor_group = groups_[r].get();
  }

  //! The copies' sum of member t's gradient, the checks over the whole model, the update of what it holds.
  template <class C>
  void apply(C& ctx, std::size_t r, std::int64_t it) {
    Replica& R = devs_[r];
    const std::size_t t = r % T_, n = R.value.size();
    const std::size_t copy = static_cast<std::size_t>(ctx.replica_id_in_sync_group()) / T_;  // global
    const std::size_t D = static_cast<std::size_t>(ctx.num_replicas_in_sync()) / T_;          // copies, all workers
    const std::span<float> g{R.grad.data(), n};
    std::span<float> hg = g;  // the gradient in host memory
    if (R.c) {
      if (R.host_grad.size() != n) R.host_grad = Tensor<float>(Shape{n});
      if (n) R.m->download(R.host_grad.data(), g.data(), n * sizeof(float));
      hg = R.host_grad.span();
    }
    if (this->workers_.size() == 1) {  // the copies are this process's: member order, exactly
      std::vector<int> peers;
      for (std::size_t d = 0; d < D; ++d) peers.push_back(static_cast<int>(d * T_ + t));
      auto& link = tensor_link(ctx);  // (local ids are global)
      if (R.comp.on())  // in 16 bits (one copy: rounded alike, as it would travel)
        R.comp.through_wire(hg, [&](auto w) { peer_sum(link, peers, copy, data_group_tag, w.data(), n, scratch(R, w)); });
      else
        peer_sum(link, peers, copy, data_group_tag, hg.data(), n, R.in);
    } else if (D > 1) {
      // across workers: each member's part at its place in the logical gradient (member 0 the replicated
      // parameters, as one replica holds them), zeros elsewhere; one hierarchical all-reduce sums each
      // element over the copies, and every member takes its part back (a replicated one: the same sum on all);
      // compressed, the zeros round to themselves and keep no residual
      R.in.assign(this->program_.num_params(), 0.f);
      move_segments(layout_[t], R.in, hg, true, t == 0);
      R.comp.all_reduce(ctx, std::span<float>(R.in));
      move_segments(layout_[t], R.in, hg, false);
    }
    // what this replica counts of the model: copy 0's members, their own elements, member 0 the replicated ones too
    auto each_counted = [&](auto&& f) {
      if (copy != 0) return;
      std::size_t at = 0;
      for (const TensorSegment& s : layout_[t]) {
        if (!s.replicated || t == 0) f(hg.subspan(at, s.length));
        at += s.length;
      }
    };
    if (this->check_) {
      double local = 0;
      each_counted([&](std::span<const float> x) { kernels::host_memory().count_nonfinite(x.data(), x.size(), &local); });
      float bad[1] = {static_cast<float>(local)};
      ctx.all_reduce(std::span<float>(bad), Sum);
      this->seen_bad_[r] = bad[0];
      if (r == 0) this->bad_ = bad[0];
      if (bad[0] != 0.f) return;  // skipped on every replica (the residual as it was)
    }
    R.comp.commit();
    const float clipnorm = R.updater ? R.updater->global_clipnorm() : 0.f;
    if (clipnorm > 0.f) {
      double sq[1] = {0.0};
      each_counted([&](std::span<const float> x) { sq[0] += square_sum_in(nullptr, x, R.scratch); });
      ctx.all_reduce(std::span<double>(sq), Sum);
      clip_in(nullptr, hg, sq[0], clipnorm, R.scratch);
    }
    if (R.c && n) R.m->upload(g.data(), hg.data(), n * sizeof(float));
    if (R.updater) R.updater->apply({R.value.data(), n}, g, 0, it);
  }

  //! peer_sum's scratch for 16-bit elements of `w`'s type.
  template <class W>
  static auto& scratch(Replica& R, W) {
    if constexpr (std::is_same_v<typename W::element_type, bf16>) return R.in_bf;
    else return R.in_fp;
  }

  ExecutorOptions opts_;
  std::size_t T_ = 1;
  std::vector<std::vector<TensorSegment>> layout_;  // per member: what it holds
  std::vector<Replica> devs_;
  std::vector<std::unique_ptr<PeerTensorGroup<Link>>> groups_;  // per replica: its copy's members
  std::string choice_;
  mutable std::optional<Tensor<float>> host_;
};

//! The executor ExecutorOptions::tensor_parallel asks a mirrored strategy
//! for (null when it is 1), or a sentence saying why it cannot be.
template <class S>
std::unique_ptr<Executor> make_tensor_parallel(S& s, ModelProgram& program) {
  const ExecutorOptions& o = s.executor_options();
  if (o.tensor_parallel != 1) {
    if (o.sharded_update == ShardedUpdate::On || o.sharded_update == ShardedUpdate::Gradients ||
        o.sharded_update == ShardedUpdate::Parameters || o.bucket_bytes)
      throw Error("ExecutorOptions::tensor_parallel: tensor parallelism reduces each member's gradient over the "
                  "copies itself; it does not combine with sharded_update (ZeRO 1-3) or bucket_bytes (yet): leave "
                  "them at Auto and 0");
    if constexpr (requires(tensor_link_t<typename S::context_type>& c, std::span<float> x) {
                    c.send(x, 0, 0);
                    c.recv(x, 0, 0);
                  })
      return std::make_unique<TensorParallelExecutor<S>>(s, program, o);
    else
      throw Error("ExecutorOptions::tensor_parallel: this strategy's replicas have no send / recv to sum a "
                  "split layer's parts over; leave tensor_parallel at 1");
  }
  return nullptr;
}

}  // namespace strata::detail
