#pragma once
//! The gradient all-reduce of replicas that live on devices with their own
//! memory (GPUs), as the core's executors see it: no CUDA header here. The
//! CUDA backend (<strata/cuda.hpp>) registers the device algorithms
//! (cuda/comm/: a direct reduce kernel among virtual GPUs or GPUs with peer
//! access) through gpu_backend().make_collectives; HostStagedCollectives is
//! the path every compute has: each replica downloads its buffer, the
//! replicas reduce in host memory in replica order, each uploads the sum.
//!   auto coll = strata::detail::make_device_collectives(devices, opts);
//!   coll->all_reduce_sum(r, compute, grad, n);   // on replica r's thread, every replica
//!   strata::Work w = coll->all_reduce_sum_async(r, compute, bucket, m);  ...;  w.wait();
//!   coll->broadcast(r, compute, grad, n, 0);      // every replica takes replica 0's
//!   coll->reduce_scatter_sum(r, compute, grad, shard, n);  coll->all_gather(r, compute, shard, value, n);
//!   coll->wire(r, compute, {.kind = WireCall::Kind::all_reduce, .format = WireFormat::bf16,
//!                           .in = w, .out = w, .n = n});   // 16 bits (compression)

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/algorithm/direct.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/communicator.hpp>
#include <strata/comm/threads/team.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/half.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/device/device.hpp>
#include <strata/device/device_compute.hpp>

namespace strata::detail {

//! One 16-bit collective of gradient compression on GPU replicas
//! (compression.hpp): `n` elements of `format` at `in` (memory of the
//! replica's compute) summed over the replicas in FP32 and rounded once
//! (all_reduce, in place: out == in; reduce_scatter: replica r's slice
//! shard_range(n, replicas, r) of the sum into `out`), or root's copied
//! into every replica's `out` (broadcast, in place). `started`: the form a
//! gradient bucket starts (the Work ends when the sum is in `out`), else
//! done on return.
struct WireCall {
  enum class Kind : unsigned char { all_reduce, reduce_scatter, broadcast };
  Kind kind = Kind::all_reduce;
  WireFormat format = WireFormat::bf16;
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t n = 0;
  int root = 0;
  bool started = false;
};

//! A started collective on a host copy: the `n_in` elements at `in`
//! (memory of `c`) downloaded to its front, `start(input, result)` started,
//! and the `n_out` elements of the result uploaded to `out` once the Work
//! is waited for (on the waiting replica's thread). `in_place`: the result
//! is the input.
template <class T, class Start>
Work staged_async(kernels::Compute& c, const T* in, std::size_t n_in, T* out, std::size_t n_out, bool in_place,
                  Start start) {
  const std::size_t at = in_place ? 0 : n_in;
  const std::shared_ptr<T[]> copy = std::make_shared_for_overwrite<T[]>(std::max(at + n_out, n_in));
  if (n_in) c.download(copy.get(), in, n_in * sizeof(T));
  Work w = start(std::span<T>(copy.get(), n_in), std::span<T>(copy.get() + at, n_out));
  return Work(std::make_unique<FollowedWork>(std::move(w), [copy, &c, out, at, n_out] {
    if (n_out) c.upload(out, copy.get() + at, n_out * sizeof(T));
  }));
}

//! Collectives over the replicas of one process whose buffers are memory of
//! their own compute. Called by every replica, on its own thread, in the
//! same order; waits have the team's deadline (CollectiveTimeout naming
//! the missing replicas); abort(r) releases the others at once.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  //! Replica `rank`'s `n` floats at `data` (memory of `c`) become the sum of
  //! every replica's, added in replica order (bitwise the same on each).
  virtual void all_reduce_sum(int rank, kernels::Compute& c, float* data, std::size_t n) = 0;
  //! all_reduce_sum started, not waited for (gradient buckets): the same
  //! sum, in the same order as the replica's other calls; `data` is the
  //! operation's until the returned Work ended (comm/work.hpp), and the
  //! replica's calls on `c` queued after that wait see the sum. By default
  //! the blocking call and a completed Work.
  virtual Work all_reduce_sum_async(int rank, kernels::Compute& c, float* data, std::size_t n) {
    all_reduce_sum(rank, c, data, n);
    return Work{};
  }
  //! Replica `rank`'s `n` floats at `data` (memory of `c`) become replica `root`'s.
  virtual void broadcast(int rank, kernels::Compute& c, float* data, std::size_t n, int root) = 0;
  //! The sum of every replica's `n` floats at `in`, added in replica order;
  //! replica `rank` gets its slice shard_range(n, replicas, rank) of it in
  //! `out` (that slice's size; not overlapping `in`). Memory of `c`.
  virtual void reduce_scatter_sum(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) = 0;
  //! Every replica's slice (shard_range(n, replicas, r) floats at its `in`)
  //! concatenated in replica order into each replica's `out` (n floats).
  virtual void all_gather(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) = 0;
  //! reduce_scatter_sum and all_gather started, not waited for (ZeRO 2 and
  //! 3's layers: fully_sharded_executor.hpp), as all_reduce_sum_async is.
  virtual Work reduce_scatter_sum_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) {
    reduce_scatter_sum(rank, c, in, out, n);
    return Work{};
  }
  virtual Work all_gather_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) {
    all_gather(rank, c, in, out, n);
    return Work{};
  }
  //! A 16-bit collective (WireCall: compression on GPU replicas); the
  //! device team and the host-staged path add in FP32 in replica order,
  //! rounded once (the CPU replicas' direct sum, bit for bit); NCCL sums
  //! bf16 and fp16 in its own order, rounding at each step of its ring.
  virtual Work wire(int rank, kernels::Compute& c, const WireCall& call) = 0;
  //! Replica `rank` failed with `why`: the others stop waiting for it.
  virtual void abort(int rank, const std::string& why) = 0;
  //! Called while no replica runs: forget a previous run (its counters, an abort).
  virtual void reset() = 0;
  //! Which algorithm runs and why (GpuReduceChoice's sentence).
  [[nodiscard]] virtual const std::string& choice() const noexcept = 0;
};

//! Every replica downloads its buffer into host memory, takes part in the
//! thread team's collective on the host copies (ThreadCommunicator: the
//! direct all-reduce, which reduces each element once in replica order, and
//! reduce_scatter, all_gather, broadcast), and uploads the result. Works for
//! any compute; on the host's compute it is bitwise MirroredStrategy's
//! direct all-reduce, since it is the very same code.
class HostStagedCollectives final : public DeviceCollectives {
 public:
  HostStagedCollectives(int replicas, CommOptions opts, std::string why)
      : team_(replicas, opts), host_(static_cast<std::size_t>(replicas)), shards_(static_cast<std::size_t>(replicas)),
        why_(std::move(why)) {}

  void all_reduce_sum(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    std::vector<float>& mine = staged(rank, n);
    if (n) c.download(mine.data(), data, n * sizeof(float));
    comm(rank).all_reduce(mine, Sum, Direct{});
    if (n) c.upload(data, mine.data(), n * sizeof(float));
  }
  //! The started forms: each on a host copy of its own (several are in
  //! flight), queued on the replica's progress thread (staged_async).
  Work all_reduce_sum_async(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    return staged_async(c, data, n, data, n, /*in_place=*/true, [&](std::span<float> in, std::span<float>) {
      return comm(rank).all_reduce_async(in, Sum, Direct{});
    });
  }
  Work reduce_scatter_sum_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    return staged_async(c, in, n, out, slice(n, rank).size(), false, [&](std::span<float> i, std::span<float> o) {
      return comm(rank).reduce_scatter_async(std::span<const float>(i), o, Sum);
    });
  }
  Work all_gather_async(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    return staged_async(c, in, slice(n, rank).size(), out, n, false, [&](std::span<float> i, std::span<float> o) {
      return comm(rank).all_gather_async(std::span<const float>(i), o);
    });
  }
  void broadcast(int rank, kernels::Compute& c, float* data, std::size_t n, int root) override {
    std::vector<float>& mine = staged(rank, n);
    if (rank == root && n) c.download(mine.data(), data, n * sizeof(float));
    comm(rank).broadcast(mine, root);
    if (rank != root && n) c.upload(data, mine.data(), n * sizeof(float));
  }
  void reduce_scatter_sum(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    std::vector<float>& mine = staged(rank, n);
    if (n) c.download(mine.data(), in, n * sizeof(float));
    const Range r = slice(n, rank);
    std::vector<float>& shard = shards_[static_cast<std::size_t>(rank)];
    shard.resize(r.size());
    comm(rank).reduce_scatter(mine, shard, Sum);
    if (r.size()) c.upload(out, shard.data(), r.size() * sizeof(float));
  }
  void all_gather(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    std::vector<float>& mine = staged(rank, n);
    const Range r = slice(n, rank);
    std::vector<float>& shard = shards_[static_cast<std::size_t>(rank)];
    shard.resize(r.size());
    if (r.size()) c.download(shard.data(), in, r.size() * sizeof(float));
    comm(rank).all_gather(shard, mine);
    if (n) c.upload(out, mine.data(), n * sizeof(float));
  }
  //! On host copies, as the started forms (blocking: waited for here); the
  //! direct algorithm, as the FP32 sums.
  Work wire(int rank, kernels::Compute& c, const WireCall& k) override {
    Work w = visit_wire(k.format, [&](auto t) {
      using T = decltype(t);
      const auto* in = static_cast<const T*>(k.in);
      auto* out = static_cast<T*>(k.out);
      ThreadCommunicator me = comm(rank);
      switch (k.kind) {
        case WireCall::Kind::reduce_scatter:
          return staged_async(c, in, k.n, out, slice(k.n, rank).size(), false, [&](std::span<T> i, std::span<T> o) {
            return me.reduce_scatter_async(std::span<const T>(i), o, Sum);
          });
        case WireCall::Kind::broadcast:  // the root's copy downloaded, every replica's uploaded
          return staged_async(c, in, rank == k.root ? k.n : 0, out, k.n, true,
                              [&](std::span<T>, std::span<T> o) { return me.broadcast_async(o, k.root); });
        case WireCall::Kind::all_reduce: break;
      }
      return staged_async(c, in, k.n, out, k.n, true,
                          [&](std::span<T> i, std::span<T>) { return me.all_reduce_async(i, Sum, Direct{}); });
    });
    if (k.started) return w;
    w.wait();
    return Work{};
  }
  void abort(int rank, const std::string& why) override { team_.abort(rank, why); }
  void reset() override { team_.reset(); }
  [[nodiscard]] const std::string& choice() const noexcept override { return why_; }

 private:
  [[nodiscard]] Range slice(std::size_t n, int rank) const {
    return shard_range(n, static_cast<std::size_t>(team_.size()), static_cast<std::size_t>(rank));
  }
  ThreadCommunicator comm(int rank) { return ThreadCommunicator{team_, rank}; }
  std::vector<float>& staged(int rank, std::size_t n) {
    std::vector<float>& v = host_[static_cast<std::size_t>(rank)];
    v.resize(n);
    return v;
  }

  Team team_;
  std::vector<std::vector<float>> host_;    // per replica, its staged copy
  std::vector<std::vector<float>> shards_;  // per replica, its slice (reduce_scatter, all_gather)
  std::string why_;
};

//! A replica context's collectives on a GPU replica's buffers (memory of
//! `c`), staged through host copies: what GPU replicas across workers shard
//! with (ZeRO 1, 2 and 3: the replica context's reduce-scatter and
//! all-gather over every worker's replicas, the CPU replicas' very sums, so
//! their bits). The started forms own their host copies until waited for.
//!   StagedContext<Ctx> st{ctx, gpu};  st.reduce_scatter_async(grad, slice, strata::Sum).wait();
template <class Ctx>
struct StagedContext {
  Ctx& ctx;
  kernels::Compute& c;

  template <class T>
  Work reduce_scatter_async(std::span<const T> in, std::span<T> out, SumOp) {
    return staged_async(c, in.data(), in.size(), out.data(), out.size(), false, [&](std::span<T> i, std::span<T> o) {
      return ctx.reduce_scatter_async(std::span<const T>(i), o, Sum);
    });
  }
  Work all_gather_async(std::span<const float> in, std::span<float> out) {
    return staged_async(c, in.data(), in.size(), out.data(), out.size(), false,
                        [&](std::span<float> i, std::span<float> o) {
                          return ctx.all_gather_async(std::span<const float>(i), o);
                        });
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, SumOp) {
    reduce_scatter_async(in, out, Sum).wait();
  }
  void all_gather(std::span<const float> in, std::span<float> out) { all_gather_async(in, out).wait(); }
  void all_reduce(std::span<float> data, SumOp) {
    std::vector<float> host(data.size());
    if (!host.empty()) c.download(host.data(), data.data(), data.size_bytes());
    ctx.all_reduce(std::span<float>(host), Sum);
    if (!host.empty()) c.upload(data.data(), host.data(), data.size_bytes());
  }
};

//! The collectives of GPU replicas `devices`: the CUDA backend's choice
//! when it is in the program, else host-staged.
inline std::unique_ptr<DeviceCollectives> make_device_collectives(const std::vector<Device>& devices,
                                                                  CommOptions opts) {
  if (gpu_backend().make_collectives) return gpu_backend().make_collectives(devices, opts);
  return std::make_unique<HostStagedCollectives>(static_cast<int>(devices.size()), opts,
                                                 "the CUDA backend's collectives are not in this program: staged "
                                                 "through host memory");
}

}  // namespace strata::detail
