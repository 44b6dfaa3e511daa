#pragma once
//! The executor of Mirrored placement at ZeRO stage 2 (ShardedUpdate::
//! Gradients) and stage 3 (ShardedUpdate::Parameters, fully sharded), for
//! replicas whose context gathers and reduce-scatters without waiting:
//! MirroredStrategy in one process (CPU or GPU replicas) and
//! MultiWorkerMirroredStrategy across workers (strategy/
//! multi_worker_sharding.hpp). The layout and a step are fully_sharded.hpp's;
//! this executor places the shards, hands each replica its windows, updates
//! each owned slice, and reads and writes the variables and optimizer state
//! as the logical whole (checkpoints load across stages and replica counts;
//! across workers such reads are collective: state_reads_collective).
//!   strata::MirroredStrategy s{strata::cpu_replicas(4)};
//!   s.executor_options().sharded_update = strata::ShardedUpdate::Parameters;   // before making the model

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/trace.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/device/device_collectives.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/execution/executor_options.hpp>
#include <strata/parallel/zero/fully_sharded.hpp>
#include <strata/parallel/zero/shard_buckets.hpp>
#include <strata/parallel/zero/sharded_replica.hpp>
#include <strata/parallel/zero/sharding_calls.hpp>
#include <strata/parallel/zero/logical_slices.hpp>
#include <strata/execution/sync_executor.hpp>
#include <strata/device/worker_sum.hpp>

namespace strata::detail {

template <class S>
class FullyShardedExecutor final : public SyncExecutor<S, FullyShardedExecutor<S>> {
  using Base = SyncExecutor<S, FullyShardedExecutor<S>>;
  friend Base;

 public:
  //! `stage`: 2 or 3.
  FullyShardedExecutor(S& s, ModelProgram& program, ExecutorOptions opts, int stage)
      : Base(s, program), opts_(opts), stage_(stage), groups_(sharding_groups(s)) {
    if constexpr (requires { s.first_local_replica(); }) first_ = static_cast<std::size_t>(s.first_local_replica());
    this->slices_span_workers_ = groups_.size() > 1;
  }
  // The replicas' programs and buffers hold memory of their computes: they go first.
  ~FullyShardedExecutor() override {
    this->reps_.clear();
    colls_.reset();
    for (Replica& R : devs_) R.updater.reset(), R.shard.reset();
  }

  [[nodiscard]] std::string collectives_choice() const override {
    std::string p = std::to_string(layout_.replicas());
    if (groups_.size() > 1) p += " (every worker's replicas)";
    std::string more = opts_.compression == Compression::None ? ""
                       : "; the reduce-scatters in " + std::string(to_string(opts_.compression)) +
                             " (error feedback: each replica keeps a residual of the whole gradient)";
    if (colls_) more += "; on the GPUs: " + colls_->choice();
    else if (!devs_.empty() && devs_.front().c)
      more += "; GPU replicas across workers: each layer staged through host memory to the replica context's "
              "collectives";
    const std::size_t nb = bk_.buckets().size();
    const std::string scattered =
        bk_.on() ? "the layers' gradients reduce-scattered in " + std::to_string(nb) + (nb == 1 ? " bucket" : " buckets") +
                       " of whole layers (" + std::to_string((opts_.bucket_bytes + 1023) >> 10) +
                       " KiB), each as backward finishes its last layer"
                 : "each layer's gradient reduce-scattered as backward finishes it";
    if (opts_.bucket_bytes && !bk_.on()) more += "; " + no_buckets_;
    if (stage_ == 2)
      return "ZeRO stage 2: " + scattered + "; each replica keeps 1/" + p +
             " of the summed gradient and of the optimizer state, updates its slice, and the slices are all-gathered "
             "into every copy" + (bk_.on() ? std::string(" by the same buckets") : std::string()) + more;
    return "ZeRO stage 3 (fully sharded): each replica keeps 1/" + p +
           " of the values, the gradient and the optimizer state; " +
           (bk_.on() ? std::string("a bucket's layers' values all-gathered before the first one's forward and "
                                   "backward (the next bucket's gather started meanwhile); ")
                     : std::string("a layer's values all-gathered before its forward and its backward (the next "
                                   "layer's gather started meanwhile); ")) +
           scattered + more;
  }

  void reset_optimizer() override {
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      Replica& R = devs_[r];
      R.comp.reset();  // the residual goes with the optimizer's state
      R.updater.reset();
      if (!this->program_.compiled()) continue;
      const std::size_t owned = layout_.owned(first_ + r);
      R.updater = R.c ? this->program_.make_updater_on(*R.c, owned) : this->program_.make_updater(owned);
    }
  }
  [[nodiscard]] bool state_reads_collective() const noexcept override { return groups_.size() > 1; }
  //! Across workers: collective (every worker calls it).
  std::vector<Tensor<float>> optimizer_state() override {
    if (devs_.empty() || !devs_.front().updater) return {};
    return join_shards([&](std::size_t r) { return devs_[r].updater->state(); });
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (devs_.empty() || !devs_.front().updater)
      throw Error("set_optimizer_state: the model is not compiled and placed yet");
    check_state_slots(slots, this->program_.num_params());
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      devs_[r].comp.reset();  // not in checkpoints: a resumed run's residual starts at zero
      devs_[r].updater->set_state(owned_part(layout_, first_ + r, slots));
    }
  }

  //! The whole variables: replica 0's copy (stage 2), or every replica's
  //! slices joined (stage 3; across workers collective: every worker calls it).
  [[nodiscard]] const Tensor<float>& value() const override {
    if (host_) return *host_;
    if (stage_ == 2) {
      host_.emplace(Shape{this->program_.num_params()});
      if (!devs_.empty() && host_->size())
        devs_.front().m->download(host_->data(), devs_.front().values.data(), host_->bytes());
      return *host_;
    }
    auto joined = join_shards([&](std::size_t r) {
      const std::span<float> mine = devs_[r].shard->owned_values();
      std::vector<Tensor<float>> one;
      one.emplace_back(Shape{mine.size()});
      if (!mine.empty()) devs_[r].m->download(one.back().data(), mine.data(), one.back().bytes());
      return one;
    });
    host_.emplace(joined.empty() ? Tensor<float>(Shape{this->program_.num_params()}) : std::move(joined.front()));
    return *host_;
  }
  void assign(const Tensor<float>& v) override {
    if (v.size() != this->program_.num_params())
      throw ShapeError("assign: " + std::to_string(v.size()) + " values for " +
                       std::to_string(this->program_.num_params()) + " parameters");
    host_.reset();
    for (std::size_t r = 0; r < devs_.size(); ++r) {
      Replica& R = devs_[r];
      if (stage_ == 2) {
        if (v.size()) R.m->upload(R.values.data(), v.data(), v.bytes());
        continue;
      }
      const std::span<float> mine = R.shard->owned_values();
      layout_.for_each_slice(first_ + r, [&](Range flat, std::size_t at) {
        if (flat.size()) R.m->upload(mine.data() + at, v.data() + flat.begin, flat.size() * sizeof(float));
      });
    }
  }

 private:
  struct Replica : ReplicaDevice {  // its compute (a GPU's) and memory, then its buffers there
    kernels::Buffer<float> values;            // stage 2: its whole copy
    kernels::Buffer<float> staged;            // stage 2: its updated slices, gathered from
    kernels::Buffer<double> bad, norm;        // its finiteness count; its squared norm for clipping
    std::unique_ptr<ShardedReplica> shard;
    std::unique_ptr<Updater> updater;
    ShardedCompression comp;  // its residual and 16-bit windows (compression on), in its memory
    std::optional<DeviceStep> step;  // a GPU's collectives of this step (its 16-bit scatters refer to it)
  };

  // -- SyncExecutor's hooks -------------------------------------------------
  void place_values(const Tensor<float>& init, std::size_t local) {
    this->reps_.clear();  // bound to the buffers below
    const std::size_t n = init.size();
    if (devs_.size() != local) make_replicas(local);
    if (colls_) colls_->reset();
    layout_ = ShardLayout(shard_units(this->program_), groups_);
    plan_buckets_here();
    check_model_state_budget(opts_.memory_budget_bytes, stage_, n, layout_.replicas(), this->program_,
                             opts_.compression != Compression::None, bucket_floats());
    for (std::size_t r = 0; r < local; ++r) {
      Replica& R = devs_[r];
      R.updater.reset();
      R.values.resize(*R.m, Shape{stage_ == 2 ? n : 0});
      R.shard = std::make_unique<ShardedReplica>(layout_, first_ + r, stage_,
                                                 std::span<const float>(R.values.data(), R.values.size()), *R.m, &bk_);
      R.comp.place(opts_.compression, n, layout_.window_pair(), layout_.owned(first_ + r), R.c);
    }
    assign(init);
  }
  //! The layers' reduce-scatters by buckets (ExecutorOptions::bucket_bytes), where they apply: not
  //! with compression (its 16-bit windows are a layer's), nor across workers running different numbers
  //! of replicas (a bucket's equal cut would not be the context's).
  void plan_buckets_here() {
    bk_ = ShardBuckets();
    no_buckets_.clear();
    if (!opts_.bucket_bytes) return;
    if (!shard_bucket_bytes(opts_))
      no_buckets_ = "each layer's reduce-scatter on its own, not by buckets (they apply without compression)";
    else if (std::count(groups_.begin(), groups_.end(), groups_.front()) != static_cast<std::ptrdiff_t>(groups_.size()))
      no_buckets_ = "each layer's reduce-scatter on its own, not by buckets (the workers run different numbers of "
                    "replicas)";
    else
      bk_ = ShardBuckets(layout_, shard_bucket_bytes(opts_));
  }
  [[nodiscard]] std::size_t bucket_floats() const {
    return bk_.state_floats(stage_, layout_.replicas(), layout_.window_pair());
  }
  //! The local replicas' computes (GPU replicas: their devices', and the device collectives).
  void make_replicas(std::size_t local) {
    colls_.reset();
    devs_.clear();
    devs_.resize(local);
    const std::vector<Device>& devices = this->s_.devices();
    const bool gpus = devices.front().is_gpu();
    for (std::size_t r = 0; r < local; ++r) devs_[r].place_on(devices[r], opts_.matmul);
    // GPU replicas in one process: the device collectives; across workers: staged through host memory to
    // the replica context's (the layout spans every worker's replicas)
    if (gpus && groups_.size() == 1) colls_ = make_device_collectives(devices, this->s_.options());
  }
  std::unique_ptr<ReplicaProgram> make_replica(std::size_t r) {
    Replica& R = devs_[r];
    const std::span<float> values{R.values.data(), R.values.size()};  // empty at stage 3
    return R.c ? this->program_.make_replica_on(*R.c, values, {}) : this->program_.make_replica(values, {});
  }
  template <class F>
  void with_host_gradient(std::size_t, F&&) {
    throw Error("a custom loop's gradient hook sees a replica's whole gradient, which ZeRO stages 2 and 3 never "
                "hold (each layer's is reduce-scattered as backward ends): use ShardedUpdate::On or Off");
  }
  void before_step(std::size_t r) {
    devs_[r].m->bind_thread();  // this pool thread issues replica r's calls: its GPU current
    if (r == 0) host_.reset();
  }
  //! Replica r failed: the others stop waiting for it in the device collectives at once.
  void replica_failed(std::size_t r, const std::string& why) {
    if (colls_) colls_->abort(static_cast<int>(r), why);
  }

  //! Replica r's gather and reduce-scatter (sharding_calls.hpp).
  template <class Ctx>
  ShardingCalls<Ctx> sharding(Ctx& ctx, std::size_t r) {
    return ShardingCalls<Ctx>{ctx, colls_.get(), devs_[r].c, static_cast<int>(r)};
  }

  template <class Ctx>
  ParameterWindows* windows_for(Ctx& ctx, std::size_t r, const Pass& pass) {
    if (pass.gradient_hook) with_host_gradient(r, [](std::span<float>) {});  // refused before the step, not after it
    if constexpr (!ShardingContext<Ctx>)
      if (!colls_)
        throw Error("ZeRO stages 2 and 3 need replica contexts that all-gather and reduce-scatter without waiting "
                    "(MirroredStrategy's CPU replicas)");
    Replica& R = devs_[r];
    auto gather = [c = sharding(ctx, r)](std::span<const float> in, std::span<float> out) mutable {
      return c.gather(in, out);
    };
    if (R.comp.on()) {  // each layer's reduce-scatter in 16 bits (its residual added, error feedback)
      if (colls_) {     // GPU replicas: rounded on the GPU, reduce-scattered by the device collectives
        DeviceStep& st = R.step.emplace(DeviceStep{*colls_, nullptr, *R.c, r, devs_.size()});
        R.shard->begin_step(gather, [&st, &c = R.comp](const ShardedReplica::ScatterCall& k) {
          return c.scatter(st, k.begin, k.window, k.in, k.out, k.owned_at);
        });
      } else {  // CPU replicas; GPU replicas across workers staged
        R.shard->begin_step(gather, [s = sharding(ctx, r), &c = R.comp](const ShardedReplica::ScatterCall& k) mutable {
          return s.on_context([&](auto& x) { return c.scatter(x, k.begin, k.window, k.in, k.out, k.owned_at); });
        });
      }
    } else {
      R.shard->begin_step(gather, [c = sharding(ctx, r)](std::span<const float> in, std::span<float> out) mutable {
        return c.scatter(in, out);
      });
    }
    return R.shard.get();
  }

  //! A step failed, once no replica runs: pending collectives settle, every device finishes what was
  //! queued (a collective's kernels may still touch a failed replica's buffers), the collectives start clean.
  void after_failure() {
    for (Replica& R : devs_) {
      if (R.shard) R.shard->drop();
      R.quiesce();
    }
    if (colls_) colls_->reset();
  }

  template <class Ctx>
  void apply(Ctx& ctx, std::size_t r, std::int64_t it) {
    Replica& R = devs_[r];
    ShardedReplica& sh = *R.shard;
    sh.finish_step();
    const std::span<float> g = sh.owned_gradient();
    if (!this->finite_gradient(ctx, r, *R.m, R.bad, std::span<const float>(g))) {
      R.comp.reset();  // skipped on every replica: the residual restarts at zero (ShardedCompression)
      return;
    }
    // clipping: the norm over every replica's owned slice, each scaling its own
    if (R.updater) this->clip_gradient(ctx, R.c, R.norm, g, g, R.updater->global_clipnorm());
    if (stage_ == 3) return R.updater->apply(sh.owned_values(), g, 0, it);
    // stage 2: its slice of each layer updated in its whole copy, then every copy gets every slice
    const std::size_t slack = bk_.on() ? bk_.largest_block() : 0;  // a bucket's block read past the last slice
    if (R.staged.size() != g.size() + slack) R.staged.resize(*R.m, Shape{g.size() + slack});
    const std::span<float> w{R.values.data(), R.values.size()};
    const std::size_t id = first_ + r;  // its global replica id
    layout_.for_each_slice(id, [&](Range flat, std::size_t at) {
      R.updater->apply(w.subspan(flat.begin, flat.size()), g.subspan(at, flat.size()), at, it);
      if (flat.size()) R.m->copy(R.staged.data() + at, w.data() + flat.begin, flat.size() * sizeof(float));
    });
    auto c = sharding(ctx, r);
    if (bk_.on()) return gather_buckets(c, R, id, w);
    std::vector<Work> gathers;
    for (std::size_t u = 0; u < layout_.units().size(); ++u) {
      const Range unit = layout_.units()[u];
      const std::span<const float> mine(R.staged.data() + layout_.owned_at(u, id), layout_.slice(u, id).size());
      gathers.push_back(c.gather(mine, w.subspan(unit.begin, unit.size())));
    }
    trace::Span span{"sharded values", trace::Category::Wait, {{"units", gathers.size()}}};
    for (Work& x : gathers) x.wait();
  }

  //! Stage 2's gather by buckets: each bucket's block of every replica's updated slices (from `staged`)
  //! all-gathered into a bucket buffer (two in flight), then placed in the copy `w`.
  template <class Calls>
  void gather_buckets(Calls& c, Replica& R, std::size_t id, std::span<float> w) {
    const std::vector<ShardBucket>& bs = bk_.buckets();
    const std::size_t p = layout_.replicas();
    Work started[2];
    auto start = [&](std::size_t k) {
      const ShardBucket& B = bs[k];
      started[k % 2] = c.gather(std::span<const float>(R.staged.data() + layout_.owned_at(B.ua, id), B.block),
                                R.shard->bucket_buffer(static_cast<int>(k % 2)).first(p * B.block));
    };
    trace::Span span{"sharded values", trace::Category::Wait, {{"buckets", bs.size()}}};
    for (std::size_t k = 0; k < bs.size() && k < 2; ++k) start(k);
    for (std::size_t k = 0; k < bs.size(); ++k) {
      started[k % 2].wait();
      bk_.unpack(*R.m, layout_, k, R.shard->bucket_buffer(static_cast<int>(k % 2)).data(), w.data());
      if (k + 2 < bs.size()) start(k + 2);
    }
  }

  //! Whole slots from every replica's owned ones (`part(r)`: local replica
  //! r's slots, in its owned layout): across workers each worker's joined
  //! and all-gathered between the workers (collective), else joined here.
  template <class Part>
  std::vector<Tensor<float>> join_shards(Part&& part) const {
    if constexpr (requires(S& x) { x.local_replicas_of(0); }) {  // across workers: MultiWorkerMirroredStrategy
      if (groups_.size() > 1)
        return join_owned_across_workers(this->s_.communicator(), layout_, first_, devs_.size(),
                                         std::forward<Part>(part));
    }
    return join_owned(layout_, std::forward<Part>(part));
  }
  ExecutorOptions opts_;
  int stage_;
  std::vector<std::size_t> groups_;  // replicas per worker
  std::size_t first_ = 0;           // the global id of local replica 0
  ShardLayout layout_;
  ShardBuckets bk_;         // the layers' reduce-scatters (stage 2: also the gathers) by buckets; off: one a layer
  std::string no_buckets_;  // why bucket_bytes does not apply (empty: it does, or was not asked)
  std::vector<Replica> devs_;                  // the local replicas
  std::unique_ptr<DeviceCollectives> colls_;  // GPU replicas' collectives; CPU replicas use their contexts
  mutable std::optional<Tensor<float>> host_;
};

}  // namespace strata::detail
