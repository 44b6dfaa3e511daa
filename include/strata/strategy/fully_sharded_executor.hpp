#pragma once
//! The executor of Mirrored placement at ZeRO stage 2 (ShardedUpdate::
//! Gradients) and stage 3 (ShardedUpdate::Parameters, fully sharded), for
//! CPU replicas whose replica context gathers and reduce-scatters without
//! waiting: MirroredStrategy in one process, and MultiWorkerMirroredStrategy
//! across workers (the layout over every worker's replicas: each holds
//! 1/p of the whole job's state; strategy/multi_worker_sharding.hpp's
//! hierarchical collectives). The shard layout, the windows
//! and what a step does are strategy/fully_sharded.hpp's; this executor
//! places the shards, hands each replica's step its windows, updates each
//! replica's owned slice, and reads and writes the variables and the
//! optimizer state as the logical whole, so checkpoints load across stages
//! and replica counts (a logical checkpoint, as everywhere). Across workers
//! another worker's shards are not in this process: reading the optimizer
//! state (and, at stage 3, the values) is collective, every worker joining
//! its shards (state_reads_collective; Model::save_checkpoint and the
//! callbacks that save call it on every worker, the chief alone writing).
//! Compression (ExecutorOptions::compression): each layer's reduce-scatter
//! in 16 bits with error feedback (ShardedCompression, compression.hpp).
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
#include <strata/strategy/compression.hpp>
#include <strata/strategy/executor_options.hpp>
#include <strata/strategy/fully_sharded.hpp>
#include <strata/strategy/sharded_replica.hpp>
#include <strata/strategy/logical_slices.hpp>
#include <strata/strategy/sync_executor.hpp>

namespace strata::detail {

//! What a strategy's Mirrored executor is at ExecutorOptions' ZeRO stage:
//! this one at stages 2 and 3 (CPU replicas in one process), else null.
template <class S>
std::unique_ptr<Executor> make_fully_sharded(S& s, ModelProgram& program);

//! Whether a replica context `Ctx` starts all-gathers and reduce-scatters without waiting.
template <class Ctx>
concept ShardingContext = requires(Ctx& c, std::span<const float> in, std::span<float> out) {
  { c.all_gather_async(in, out) } -> std::same_as<Work>;
  { c.reduce_scatter_async(in, out, Sum) } -> std::same_as<Work>;
};

//! The replicas of each worker of `s` (one process: one worker).
template <class S>
std::vector<std::size_t> sharding_groups(S& s) {
  if constexpr (requires { s.local_replicas_of(0); }) {
    std::vector<std::size_t> g;
    for (int w = 0; w < s.num_workers(); ++w) g.push_back(static_cast<std::size_t>(s.local_replicas_of(w)));
    return g;
  } else {
    return {static_cast<std::size_t>(s.num_local_replicas())};
  }
}

//! The unit sizes of a program's shard layout: each layer's parameters.
inline std::vector<std::size_t> shard_units(const ModelProgram& program) {
  try {
    return program.layer_param_counts();
  } catch (const Error&) {
    throw Error("sharded gradients or parameters (ZeRO 2 and 3) bind a model's layers one by one, and this model "
                "program describes no layers: use ShardedUpdate::On (ZeRO 1) or Off");
  }
}

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
  ~FullyShardedExecutor() override { this->reps_.clear(); }

  [[nodiscard]] std::string collectives_choice() const override {
    std::string p = std::to_string(layout_.replicas());
    if (groups_.size() > 1) p += " (every worker's replicas)";
    const std::string wire = opts_.compression == Compression::None ? ""
                             : "; the reduce-scatters in " + std::string(to_string(opts_.compression)) +
                                   " (error feedback: each replica keeps a residual of the whole gradient)";
    if (stage_ == 2)
      return "ZeRO stage 2: each layer's gradient reduce-scattered as backward finishes it; each replica keeps "
             "1/" + p + " of the summed gradient and of the optimizer state, updates its slice, and the slices are "
             "all-gathered into every copy" + wire;
    return "ZeRO stage 3 (fully sharded): each replica keeps 1/" + p +
           " of the values, the gradient and the optimizer state; a layer's values all-gathered before its forward "
           "and its backward (the next layer's gather started meanwhile), its gradient reduce-scattered after its "
           "backward" + wire;
  }

  void reset_optimizer() override {
    for (std::size_t r = 0; r < updaters_.size(); ++r) {
      comp_[r].reset();  // the residual goes with the optimizer's state
      updaters_[r].reset();
      if (this->program_.compiled()) updaters_[r] = this->program_.make_updater(layout_.owned(first_ + r));
    }
  }
  [[nodiscard]] bool state_reads_collective() const noexcept override { return groups_.size() > 1; }
  //! Across workers: collective (every worker calls it).
  std::vector<Tensor<float>> optimizer_state() override {
    if (updaters_.empty() || !updaters_.front()) return {};
    return join_shards([&](std::size_t r) { return updaters_[r]->state(); });
  }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (updaters_.empty() || !updaters_.front())
      throw Error("set_optimizer_state: the model is not compiled and placed yet");
    check_state_slots(slots, this->program_.num_params());
    for (std::size_t r = 0; r < updaters_.size(); ++r) {
      comp_[r].reset();  // not in checkpoints: a resumed run's residual starts at zero
      updaters_[r]->set_state(owned_part(layout_, first_ + r, slots));
    }
  }

  //! The whole variables: replica 0's copy (stage 2), or every replica's
  //! slices joined (stage 3; across workers collective: every worker calls it).
  [[nodiscard]] const Tensor<float>& value() const override {
    if (host_) return *host_;
    if (stage_ == 2) {
      host_.emplace(Shape{this->program_.num_params()});
      if (!values_.empty()) std::copy_n(values_.front().data(), host_->size(), host_->data());
      return *host_;
    }
    auto joined = join_shards([&](std::size_t r) {
      const std::span<float> mine = shards_[r]->owned_values();
      std::vector<Tensor<float>> one;
      one.emplace_back(Shape{mine.size()});
      std::copy(mine.begin(), mine.end(), one.back().data());
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
    if (stage_ == 2) {
      for (Tensor<float>& w : values_) std::copy_n(v.data(), v.size(), w.data());
      return;
    }
    for (std::size_t r = 0; r < shards_.size(); ++r) {
      const std::span<float> mine = shards_[r]->owned_values();
      layout_.for_each_slice(first_ + r, [&](Range flat, std::size_t at) {
        std::copy_n(v.data() + flat.begin, flat.size(), mine.data() + at);
      });
    }
  }

 private:
  // -- SyncExecutor's hooks -------------------------------------------------
  void place_values(const Tensor<float>& init, std::size_t local) {
    this->reps_.clear();  // bound to the buffers below
    const std::size_t n = init.size();
    layout_ = ShardLayout(shard_units(this->program_), groups_);
    check_budget(n, layout_.replicas());
    shards_.clear();
    values_.clear();
    if (stage_ == 2) values_.assign(local, init);
    for (std::size_t r = 0; r < local; ++r)
      shards_.push_back(std::make_unique<ShardedReplica>(
          layout_, first_ + r, stage_, stage_ == 2 ? std::span<const float>(values_[r].span()) : std::span<const float>{}));
    bad_.resize(local);
    staged_.assign(local, Tensor<float>{});
    updaters_.resize(local);
    comp_.assign(local, ShardedCompression{});
    for (std::size_t r = 0; r < local; ++r)
      comp_[r].place(opts_.compression, n, layout_.window_pair(), layout_.owned(first_ + r));
    assign(init);
  }
  void check_budget(std::size_t n, std::size_t local) {
    check_model_state_budget(opts_.memory_budget_bytes, stage_, n, local, this->program_,
                             opts_.compression != Compression::None);
  }
  std::unique_ptr<ReplicaProgram> make_replica(std::size_t r) {
    if (stage_ == 2) return this->program_.make_replica(values_[r].span(), {});
    return this->program_.make_replica({}, {});
  }
  template <class F>
  void with_host_gradient(std::size_t, F&&) {
    throw Error("a custom loop's gradient hook sees a replica's whole gradient, which ZeRO stages 2 and 3 never "
                "hold (each layer's is reduce-scattered as backward ends): use ShardedUpdate::On or Off");
  }
  void before_step(std::size_t r) {
    if (r == 0) host_.reset();
  }

  template <class Ctx>
  ParameterWindows* windows_for(Ctx& ctx, std::size_t r, const Pass& pass) {
    if (pass.gradient_hook) with_host_gradient(r, [](std::span<float>) {});  // refused before the step, not after it
    if constexpr (ShardingContext<Ctx>) {
      auto gather = [&ctx](std::span<const float> in, std::span<float> out) { return ctx.all_gather_async(in, out); };
      if (comp_[r].on())  // each layer's reduce-scatter in 16 bits (its residual added, error feedback)
        shards_[r]->begin_step(gather, [&ctx, &c = comp_[r]](const ShardedReplica::ScatterCall& k) {
          return c.scatter(ctx, k.begin, k.window, k.in, k.out, k.owned_at);
        });
      else
        shards_[r]->begin_step(gather, [&ctx](std::span<const float> in, std::span<float> out) {
          return ctx.reduce_scatter_async(in, out, Sum);
        });
      return shards_[r].get();
    } else {
      throw Error("ZeRO stages 2 and 3 need replica contexts that all-gather and reduce-scatter without waiting "
                  "(MirroredStrategy's CPU replicas)");
    }
  }

  void after_failure() {
    for (auto& sh : shards_) sh->drop();
  }

  template <class Ctx>
  void apply(Ctx& ctx, std::size_t r, std::int64_t it) {
    ShardedReplica& sh = *shards_[r];
    sh.finish_step();
    const std::span<float> g = sh.owned_gradient();
    if (!this->finite_gradient(ctx, r, kernels::host_memory(), bad_[r], std::span<const float>(g))) {
      comp_[r].reset();  // skipped on every replica: the residual restarts at zero (ShardedCompression)
      return;
    }
    // clipping: the norm over every replica's owned slice, each scaling its own
    if (updaters_[r]) this->clip_gradient(ctx, nullptr, bad_[r], g, g, updaters_[r]->global_clipnorm());
    if (stage_ == 3) return updaters_[r]->apply(sh.owned_values(), g, 0, it);
    // stage 2: its slice of each layer updated in its whole copy, then every copy gets every slice
    Tensor<float>& staged = staged_[r];
    if (staged.size() != g.size()) staged = Tensor<float>(Shape{g.size()});
    const std::span<float> w = values_[r].span();
    const std::size_t id = first_ + r;  // its global replica id
    layout_.for_each_slice(id, [&](Range flat, std::size_t at) {
      updaters_[r]->apply(w.subspan(flat.begin, flat.size()), g.subspan(at, flat.size()), at, it);
      std::copy_n(w.data() + flat.begin, flat.size(), staged.data() + at);
    });
    if constexpr (ShardingContext<Ctx>) {
      std::vector<Work> gathers;
      for (std::size_t u = 0; u < layout_.units().size(); ++u) {
        const Range unit = layout_.units()[u];
        gathers.push_back(ctx.all_gather_async(
            std::span<const float>(staged.data() + layout_.owned_at(u, id), layout_.slice(u, id).size()),
            w.subspan(unit.begin, unit.size())));
      }
      trace::Span span{"sharded values", trace::Category::Wait, {{"units", gathers.size()}}};
      for (Work& x : gathers) x.wait();
    }
  }

  //! Whole slots from every replica's owned ones (`part(r)`: local replica
  //! r's slots, in its owned layout): across workers each worker's joined
  //! and all-gathered between the workers (collective), else joined here.
  template <class Part>
  std::vector<Tensor<float>> join_shards(Part&& part) const {
    if constexpr (requires(S& x) { x.local_replicas_of(0); }) {  // across workers: MultiWorkerMirroredStrategy
      if (groups_.size() > 1) return join_across_workers(std::forward<Part>(part));
    }
    return join_owned(layout_, std::forward<Part>(part));
  }
  template <class Part>
  std::vector<Tensor<float>> join_across_workers(Part&& part) const {
    const std::size_t local = shards_.size(), p = layout_.replicas();
    std::vector<std::vector<Tensor<float>>> mine(local);
    for (std::size_t r = 0; r < local; ++r) mine[r] = part(r);
    // every worker joins the same number of slots (the same model and optimizer: agreed at placing)
    const std::size_t slots = mine.empty() ? 0 : mine.front().size();
    std::size_t here = 0, all = 0;
    for (std::size_t g = 0; g < p; ++g) (g >= first_ && g < first_ + local ? here : all) += layout_.owned(g);
    all += here;
    auto& comm = this->s_.communicator();
    agree_on_state_read(comm,
                        "reading the sharded state (ZeRO 2 and 3 across workers: each worker holds its shards only) "
                        "is collective: call save_checkpoint (at stage 3 also get_weights, save_weights) on every "
                        "worker together, the chief alone writes; ",
                        slots, all);
    std::vector<Tensor<float>> out;
    std::vector<float> send(here), got(all);
    for (std::size_t k = 0; k < slots; ++k) {
      std::size_t at = 0;
      for (std::size_t r = 0; r < local; ++r) {
        std::copy_n(mine[r][k].data(), layout_.owned(first_ + r), send.data() + at);
        at += layout_.owned(first_ + r);
      }
      trace::Span span{"sharded state gather", trace::Category::Collective, {{"floats", all}}};
      comm.all_gather(std::span<const float>(send), std::span<float>(got));
      Tensor<float>& whole = out.emplace_back(Shape{layout_.params()});
      std::size_t from = 0;  // replica g's owned vector in `got`: replicas in global order
      for (std::size_t g = 0; g < p; ++g) {
        layout_.for_each_slice(g, [&](Range flat, std::size_t o) {
          std::copy_n(got.data() + from + o, flat.size(), whole.data() + flat.begin);
        });
        from += layout_.owned(g);
      }
    }
    return out;
  }

  ExecutorOptions opts_;
  int stage_;
  std::vector<std::size_t> groups_;  // replicas per worker
  std::size_t first_ = 0;           // the global id of local replica 0
  ShardLayout layout_;
  std::vector<std::unique_ptr<ShardedReplica>> shards_;
  std::vector<Tensor<float>> values_;   // stage 2: each replica's whole copy
  std::vector<Tensor<float>> staged_;   // stage 2: each replica's updated slices, gathered from
  std::vector<std::unique_ptr<Updater>> updaters_;
  std::vector<kernels::Buffer<double>> bad_;  // each replica's finiteness count
  std::vector<ShardedCompression> comp_;      // each replica's residual and 16-bit windows (compression on)
  mutable std::optional<Tensor<float>> host_;
};

template <class S>
std::unique_ptr<Executor> make_fully_sharded(S& s, ModelProgram& program) {
  const ExecutorOptions& o = s.executor_options();
  // over every replica of every worker: ZeRO 2 and 3 shard the whole job's state
  const int stage = zero_stage(o.sharded_update, static_cast<std::size_t>(s.num_replicas_in_sync()));
  if (stage < 2) return nullptr;
  const char* why = nullptr;
  const char* instead = "use ShardedUpdate::On or Off";
  if (s.devices().front().is_gpu()) {
    why = "GPU replicas shard the optimizer state only (ZeRO 1) so far";
  } else if (!ShardingContext<typename S::context_type>) {
    why = "its replica contexts cannot all-gather and reduce-scatter over every replica without waiting";
    instead = "use ShardedUpdate::Off";
  }
  if (why)
    throw Error("ZeRO stage " + std::to_string(stage) + " (ShardedUpdate::" +
                (stage == 2 ? "Gradients" : "Parameters") + ") is not available here: " + why + "; " + instead);
  return std::make_unique<FullyShardedExecutor<S>>(s, program, o, stage);
}

}  // namespace strata::detail
