#pragma once
//! BasicMultiWorkerMirroredStrategy<Comm> (MultiWorkerMirroredStrategy is
//! it over MPI's communicator: strategy/mpi.hpp, included by
//! strategy/multi_worker.hpp): synchronous data parallelism across
//! processes (workers, launched by mpirun), each running p local CPU
//! replicas (threads). Variables are mirrored on every replica of every
//! worker; an all-reduce is hierarchical: the local replicas reduce onto
//! local replica 0 (shared memory), which all-reduces with the other
//! workers over the workers' communicator (a WorkerCommunicator:
//! comm/workers.hpp; MPI), and the result is broadcast back locally. Variables
//! start from worker 0's values; a failure on any worker reaches every
//! worker as an error (no hang), within the workers' timeout; at once when a
//! strata call failed, or an exception of the program's own left the
//! strategy's scope or was never caught (comm/mpi/communicator.hpp).
//!   strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(2)};   // under mpirun -np N
//!   s.run([&](auto& ctx) { ctx.all_reduce(grad, strata::Sum); });    // over 2N replicas

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/comm/gpu_choice.hpp>
#include <strata/comm/progress.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/communicator.hpp>
#include <strata/comm/work.hpp>
#include <strata/comm/workers.hpp>
#include <strata/execution/executor.hpp>
#include <strata/parallel/data/mirrored_executor.hpp>
#include <strata/parallel/data/multi_worker_executor.hpp>
#include <strata/strategy/strategy.hpp>
#include <strata/device/worker_sum.hpp>

namespace strata {

template <WorkerCommunicator Comm>
class BasicMultiWorkerMirroredStrategy;

//! What the function given to MultiWorkerMirroredStrategy::run receives.
template <WorkerCommunicator Comm>
class BasicMultiWorkerReplicaContext {
 public:
  BasicMultiWorkerReplicaContext(BasicMultiWorkerMirroredStrategy<Comm>& s, ThreadCommunicator local)
      : s_(s), local_(local) {}

  //! Global replica id: worker w's replicas follow those of workers 0 .. w-1.
  [[nodiscard]] int replica_id_in_sync_group() const noexcept;
  [[nodiscard]] int num_replicas_in_sync() const noexcept;
  [[nodiscard]] int local_replica_id() const noexcept { return local_.rank(); }
  [[nodiscard]] int num_local_replicas() const noexcept { return local_.size(); }
  [[nodiscard]] int worker_index() const noexcept;
  [[nodiscard]] int num_workers() const noexcept;
  //! The collectives among this worker's replicas only.
  [[nodiscard]] ThreadCommunicator& local_communicator() noexcept { return local_; }

  //! In place, over every replica of every worker: local reduce, MPI
  //! all-reduce between the workers' leaders, local broadcast.
  template <MutableBuffer R, ReduceOperation Op>
  void all_reduce(R&& data, Op op);
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void all_reduce(In&& in, Out&& out, Op op) {
    if (std::ranges::size(in) != std::ranges::size(out))
      throw ShapeError("all_reduce: the output holds " + std::to_string(std::ranges::size(out)) +
                       " elements but the input " + std::to_string(std::ranges::size(in)));
    std::copy_n(std::ranges::data(in), std::ranges::size(in), std::ranges::data(out));
    all_reduce(std::forward<Out>(out), op);
  }
  //! Copies global replica `root`'s `data` into every replica's.
  template <MutableBuffer R>
  void broadcast(R&& data, int root);
  //! The reduction of every replica's `in` into global replica `root`'s `out`.
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void reduce_to_one(In&& in, Out&& out, int root, Op op) {
    using T = detail::buffer_element_t<In>;
    std::vector<T> tmp(std::ranges::data(in), std::ranges::data(in) + std::ranges::size(in));
    all_reduce(tmp, op);
    if (replica_id_in_sync_group() == root) {
      if (std::ranges::size(out) != tmp.size())
        throw ShapeError("reduce_to_one: the root's output holds " + std::to_string(std::ranges::size(out)) +
                         " elements but the inputs " + std::to_string(tmp.size()));
      std::copy(tmp.begin(), tmp.end(), std::ranges::data(out));
    }
  }
  void barrier();
  //! The all-reduce above without waiting (gradient buckets): queued on this
  //! replica's own progress thread, which runs the hierarchical all-reduce
  //! (its local steps and, on the leader, the MPI one) in issue order with
  //! its other non-blocking calls. Wait for it before any blocking
  //! collective of this context (they do not queue behind it).
  //!   strata::Work w = ctx.all_reduce_async(bucket, strata::Sum);  ...;  w.wait();
  template <MutableBuffer R, ReduceOperation Op>
    requires std::ranges::borrowed_range<R>
  Work all_reduce_async(R&& data, Op op);
  //! ZeRO across workers, queued as all_reduce_async (multi_worker_sharding.hpp): `in` (float, or bf16/fp16)
  //! summed over every replica, this replica's slice into `out`; the slices joined.
  template <WireElement T> Work reduce_scatter_async(std::span<const T> in, std::span<T> out, SumOp);
  Work all_gather_async(std::span<const float> in, std::span<float> out);

 private:
  template <WireElement T> void reduce_scatter_now(std::span<const T> in, std::span<T> out);
  void all_gather_now(std::span<const float> in, std::span<float> out);
  template <class T, class F>  // T: the elements' type (for the description)
  Work queued(const char* what, std::size_t n, F&& f);

  BasicMultiWorkerMirroredStrategy<Comm>& s_;
  ThreadCommunicator local_;
};

template <WorkerCommunicator Comm>
class BasicMultiWorkerMirroredStrategy : public detail::StrategySurface<BasicMultiWorkerMirroredStrategy<Comm>> {
 public:
  using sync_policy = Synchronous;
  using placement_policy = Mirrored;
  static constexpr bool across_workers = true;  // parallel/dispatch.hpp wraps its executor in MultiWorkerExecutor
  using reduce_policy = AutoReduce;
  using context_type = BasicMultiWorkerReplicaContext<Comm>;
  using communicator_type = Comm;
  using options_type = typename multi_worker_options<Comm>::type;
  static constexpr std::string_view name = "multi_worker_mirrored";

  //! This process is one worker of the job (every process: Comm::world, for
  //! MPI every rank of MPI_COMM_WORLD), running a replica on each of `local`
  //! devices. Collective: every rank constructs it. Workers may run
  //! different numbers of replicas.
  explicit BasicMultiWorkerMirroredStrategy(std::vector<Device> local = {cpu(0)}, options_type opts = {})
      : BasicMultiWorkerMirroredStrategy(Comm::world(opts.across_options()), std::move(local), opts.local) {}
  //! The workers are the ranks of `workers` (for example a split of the world).
  BasicMultiWorkerMirroredStrategy(Comm workers, std::vector<Device> local, CommOptions local_opts = {})
      : comm_(std::move(workers)),
        devices_(check_devices(std::move(local))),
        pool_(static_cast<int>(devices_.size()), with_leader_slack(local_opts, comm_.options())),
        async_(devices_.size()) {
    comm_.set_interrupt(&pool_.team().aborted_flag());
    for (std::size_t r = 0; r < async_.size(); ++r) {  // each replica's non-blocking all-reduces, in its order
      async_[r] = std::make_unique<detail::ProgressQueue>();
      async_[r]->configure("worker " + std::to_string(comm_.rank()) + ", local replica " + std::to_string(r),
                           pool_.team().options().timeout,
                           [this, r](const std::string& why) { pool_.team().abort(static_cast<int>(r), why); });
    }
    std::vector<std::int64_t> mine{static_cast<std::int64_t>(devices_.size())}, all(static_cast<std::size_t>(comm_.size()));
    comm_.all_gather(mine, all);
    for (int w = 0; w < comm_.size(); ++w) {
      firsts_.push_back(total_);
      total_ += static_cast<int>(all[static_cast<std::size_t>(w)]);
    }
    offset_ = firsts_[static_cast<std::size_t>(comm_.rank())];
  }
  BasicMultiWorkerMirroredStrategy(const BasicMultiWorkerMirroredStrategy&) = delete;
  BasicMultiWorkerMirroredStrategy& operator=(const BasicMultiWorkerMirroredStrategy&) = delete;

  //! Replicas over all workers.
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return total_; }
  [[nodiscard]] int num_local_replicas() const noexcept { return static_cast<int>(devices_.size()); }
  //! The global id of this worker's first replica.
  [[nodiscard]] int first_local_replica() const noexcept { return offset_; }
  [[nodiscard]] int num_workers() const noexcept { return comm_.size(); }
  //! The replicas worker `w` runs (0 <= w < num_workers()).
  [[nodiscard]] int local_replicas_of(int w) const {
    if (w < 0 || w >= num_workers())
      throw Error("MultiWorkerMirroredStrategy::local_replicas_of(" + std::to_string(w) + "): there are " +
                  std::to_string(num_workers()) + " workers");
    const auto i = static_cast<std::size_t>(w);
    return (i + 1 < firsts_.size() ? firsts_[i + 1] : total_) - firsts_[i];
  }
  [[nodiscard]] int worker_index() const noexcept { return comm_.rank(); }
  //! Worker 0: the one that prints, saves checkpoints, and whose initial
  //! variable values every worker starts from.
  [[nodiscard]] bool is_chief() const noexcept { return comm_.rank() == 0; }
  [[nodiscard]] const std::vector<Device>& devices() const noexcept { return devices_; }
  //! The local replicas' collective options (CommOptions of the constructor).
  [[nodiscard]] const CommOptions& options() noexcept { return pool_.team().options(); }
  //! The communicator between workers (auto_choice, options, health).
  [[nodiscard]] Comm& communicator() noexcept { return comm_; }

  //! Runs `fn(ctx)` on every local replica and returns what each returned
  //! (this worker's replicas only). If fn throws on any replica of any
  //! worker, every worker's run throws: the failing one ReplicaError with
  //! its exception, the others ReplicaError whose cause is the
  //! CollectiveAborted that carries the failing worker's message.
  template <std::invocable<context_type&> F>
  auto run(F&& fn) {
    mpi_mismatch_ = false;
    try {
      return detail::run_replicas<context_type>(
          pool_, [&](int r) { return context_type{*this, ThreadCommunicator(pool_.team(), r)}; }, fn);
    } catch (const ReplicaError& e) {
      for (auto& q : async_) q->drain();  // a failed replica's non-blocking all-reduces end first (aborted: bounded)
      const std::string what = detail::what_of(e.cause());
      // Every worker saw an MPI-level disagreement at the same call: nobody
      // needs telling. Anything else: tell the others, so they do not wait.
      if (!mpi_mismatch_) comm_.abort("worker " + std::to_string(worker_index()) + ": " + what);
      throw ReplicaError(offset_ + e.replica(), total_, e.cause(), what);
    }
  }

  //! Collective: reduces per-replica values over every replica of every
  //! worker; all workers get the result.
  template <ReduceOperation Op, Element T>
  T reduce(Op, const PerReplica<T>& v) {
    detail::check_op<Op, T>();
    if (v.size() != devices_.size())
      throw ShapeError("MultiWorkerMirroredStrategy::reduce: got " + std::to_string(v.size()) + " values for " +
                       std::to_string(devices_.size()) + " local replicas");
    T acc = v[0];
    for (std::size_t r = 1; r < v.size(); ++r) acc = Op::combine(acc, v[r]);
    T buf[1] = {acc};
    if constexpr (std::same_as<Op, MeanOp>) comm_.all_reduce(buf, Sum);
    else comm_.all_reduce(buf, Op{});
    detail::finalize<Op>(buf, 1, static_cast<std::size_t>(total_));
    return buf[0];
  }

  //! A mirrored variable (one copy per local replica), every copy starting
  //! from worker 0's `init`. Collective.
  template <Element T>
  MirroredVariable<T> make_variable(const Tensor<T>& init) {
    Tensor<T> start = init;
    comm_.broadcast(start.span(), 0);
    return MirroredVariable<T>(start, num_local_replicas());
  }

  //! Marks `dataset` for distribution, auto-sharding it across workers as
  //! TensorFlow's AutoShardPolicy.AUTO does:
  //! - by file, when it is read from several files (data::from_files): each
  //!   worker reads files w, w + W, ... and batches its share of the global
  //!   batch (batch(n) becomes batch(ceil(n / W))); every step the workers
  //!   agree on the global batch (a small all-reduce), and a worker whose
  //!   files are exhausted takes part with empty batches until all are;
  //! - by data otherwise: every worker iterates the same global batches (so
  //!   give every worker the same dataset and seed) and each replica takes
  //!   its rows of each, exactly as one process with as many replicas would.
  //! The loss is scaled by the global batch over all workers.
  template <class D>
  [[nodiscard]] Distributed<std::remove_cvref_t<D>> distribute(D&& dataset) {
    if constexpr (requires { dataset.shard_files(std::size_t{1}, std::size_t{0}); }) {
      if (num_workers() > 1)
        if (auto mine = dataset.shard_files(static_cast<std::size_t>(num_workers()),
                                            static_cast<std::size_t>(worker_index())))
          return {std::move(*mine), &this->any(), true};
    }
    return {std::forward<D>(dataset), &this->any()};
  }

  //! The workers as the executor's synchronous loop uses them (collectives over the workers' communicator).
  [[nodiscard]] detail::Workers<Comm> workers() noexcept { return detail::Workers<Comm>(comm_); }

  //! How GPU replicas' sums cross workers (device/worker_sum.hpp), `first`
  //! being local replica 0's compute: NCCL where <strata/nccl_mpi.hpp> is
  //! included and every worker's replica 0 has a GPU of its own, else staged
  //! through host memory over this strategy's communicator between workers. Collective
  //! over the workers; STRATA_WORKER_ALLREDUCE (nccl, host_staged) forces one.
  [[nodiscard]] std::unique_ptr<detail::WorkerSum> make_worker_sum(kernels::Compute& first) {
    auto host = detail::HostSums::of([this](auto v) { leader([&] { comm_.all_reduce(v, Sum); }); });
    if (auto make = detail::nccl_worker_sum<Comm>().make) return make(comm_, devices_.front(), first, std::move(host));
    const char* force = std::getenv("STRATA_WORKER_ALLREDUCE");
    GpuReduceChoice c = choose_worker_reduce({}, /*nccl_available=*/false, force ? force : "");
    return std::make_unique<detail::HostStagedWorkerSum>(std::move(host), std::move(c.why));
  }

 private:
  friend class BasicMultiWorkerReplicaContext<Comm>;

  static std::vector<Device> check_devices(std::vector<Device> d) {
    if (d.empty()) throw Error("strata: MultiWorkerMirroredStrategy needs at least one local device, got none");
    for (const Device& dev : d)  // GPU replicas, or CPU ones, not both
      if (dev.is_gpu() != d.front().is_gpu())
        throw Error("strata: " + d.front().str() + " and " + dev.str() +
                    ": a strategy's replicas are all GPUs or all CPUs");
    return d;
  }
  static CommOptions with_leader_slack(CommOptions local, const typename Comm::Options& across) {
    local.timeout += across.timeout;
    return local;
  }

  //! The leader's share of a hierarchical collective: any error across workers marks
  //! whether every worker saw it (a disagreement) before it propagates.
  template <class F>
  void leader(F&& f) {
    try {
      f();
    } catch (const CollectiveMismatch&) {
      mpi_mismatch_ = true;
      throw;
    }
  }

  template <class T>
  std::span<T> stage(std::size_t n) {
    stage_.resize(std::max(stage_.size(), n * sizeof(T)));
    return {reinterpret_cast<T*>(stage_.data()), n};
  }

  Comm comm_;
  std::vector<Device> devices_;
  detail::ReplicaPool pool_;
  int offset_ = 0, total_ = 0;
  std::vector<int> firsts_;  // per worker: the global id of its first replica
  bool mpi_mismatch_ = false;
  std::vector<std::byte> stage_;  // the leader's reduction buffer (8-byte aligned by new)
  // Last declared, so first destroyed (each runs what it holds, then ends its thread): per local replica.
  std::vector<std::unique_ptr<detail::ProgressQueue>> async_;
};

template <WorkerCommunicator Comm>
int BasicMultiWorkerReplicaContext<Comm>::replica_id_in_sync_group() const noexcept { return s_.offset_ + local_.rank(); }
template <WorkerCommunicator Comm>
int BasicMultiWorkerReplicaContext<Comm>::num_replicas_in_sync() const noexcept { return s_.total_; }
template <WorkerCommunicator Comm>
int BasicMultiWorkerReplicaContext<Comm>::worker_index() const noexcept { return s_.worker_index(); }
template <WorkerCommunicator Comm>
int BasicMultiWorkerReplicaContext<Comm>::num_workers() const noexcept { return s_.num_workers(); }

template <WorkerCommunicator Comm>
template <MutableBuffer R, ReduceOperation Op>
void BasicMultiWorkerReplicaContext<Comm>::all_reduce(R&& data, Op) {
  using T = detail::buffer_element_t<R>;
  detail::check_op<Op, T>();
  // MEAN is a sum everywhere and one division by every replica at the end
  using Partial = std::conditional_t<std::same_as<Op, MeanOp>, SumOp, Op>;
  std::span<T> mine(std::ranges::data(data), std::ranges::size(data));
  const bool lead = local_.rank() == 0;
  if (local_.size() == 1) {
    s_.leader([&] { s_.comm_.all_reduce(mine, Partial{}); });
  } else {
    std::span<T> acc = lead ? s_.template stage<T>(mine.size()) : std::span<T>{};
    local_.reduce_to_one(mine, acc, 0, Partial{});
    if (lead) {
      s_.leader([&] { s_.comm_.all_reduce(acc, Partial{}); });
      std::copy(acc.begin(), acc.end(), mine.begin());
    }
    local_.broadcast(mine, 0);
  }
  detail::finalize<Op>(mine.data(), mine.size(), static_cast<std::size_t>(s_.total_));
}

template <WorkerCommunicator Comm>
template <MutableBuffer R, ReduceOperation Op>
  requires std::ranges::borrowed_range<R>
Work BasicMultiWorkerReplicaContext<Comm>::all_reduce_async(R&& data, Op op) {
  using T = detail::buffer_element_t<R>;
  detail::check_op<Op, T>();
  std::span<T> mine(std::ranges::data(data), std::ranges::size(data));
  return s_.async_[static_cast<std::size_t>(local_.rank())]->submit(
      detail::Described<T>{"all_reduce", mine.size()}, [ctx = *this, mine, op]() mutable {
        try {
          ctx.all_reduce(mine, op);
        } catch (const std::exception& e) {
          // as a failed blocking step does (the executor aborts the team): the other local
          // replicas, maybe waiting in this all-reduce's broadcast, end with this cause at
          // once, and this replica's later queued all-reduces issue no local collective
          ctx.s_.pool_.team().abort(ctx.local_.rank(), e.what());
          throw;
        }
      });
}

template <WorkerCommunicator Comm>
template <MutableBuffer R>
void BasicMultiWorkerReplicaContext<Comm>::broadcast(R&& data, int root) {
  if (root < 0 || root >= s_.total_)
    throw Error("broadcast: root " + std::to_string(root) + " is not a replica (there are " +
                std::to_string(s_.total_) + ")");
  // the worker holding the root: the last whose first replica is <= root
  const auto& firsts = s_.firsts_;
  const int worker = static_cast<int>(std::upper_bound(firsts.begin(), firsts.end(), root) - firsts.begin()) - 1;
  const bool here = worker == s_.worker_index();
  if (here) local_.broadcast(data, root - s_.offset_);
  if (local_.rank() == 0) s_.leader([&] { s_.comm_.broadcast(data, worker); });
  if (!here) local_.broadcast(data, 0);
}

template <WorkerCommunicator Comm>
void BasicMultiWorkerReplicaContext<Comm>::barrier() {
  local_.barrier();
  if (local_.rank() == 0) s_.leader([&] { s_.comm_.barrier(); });
  local_.barrier();
}

}  // namespace strata

#include <strata/strategy/multi_worker_sharding.hpp>
