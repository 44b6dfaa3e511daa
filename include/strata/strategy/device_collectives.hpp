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
//!   coll->broadcast(r, compute, grad, n, 0);      // every replica takes replica 0's
//!   coll->reduce_scatter_sum(r, compute, grad, shard, n);  coll->all_gather(r, compute, shard, value, n);

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/team.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/strategy/device.hpp>
#include <strata/strategy/device_compute.hpp>

namespace strata::detail {

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
  //! Replica `rank`'s `n` floats at `data` (memory of `c`) become replica `root`'s.
  virtual void broadcast(int rank, kernels::Compute& c, float* data, std::size_t n, int root) = 0;
  //! The sum of every replica's `n` floats at `in`, added in replica order;
  //! replica `rank` gets its slice shard_range(n, replicas, rank) of it in
  //! `out` (that slice's size; not overlapping `in`). Memory of `c`.
  virtual void reduce_scatter_sum(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) = 0;
  //! Every replica's slice (shard_range(n, replicas, r) floats at its `in`)
  //! concatenated in replica order into each replica's `out` (n floats).
  virtual void all_gather(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) = 0;
  //! Replica `rank` failed with `why`: the others stop waiting for it.
  virtual void abort(int rank, const std::string& why) = 0;
  //! Called while no replica runs: forget a previous run (its counters, an abort).
  virtual void reset() = 0;
  //! Which algorithm runs and why (GpuReduceChoice's sentence).
  [[nodiscard]] virtual const std::string& choice() const noexcept = 0;
};

//! Every replica downloads its buffer into host memory, reduces its shard of
//! every replica's host copy in replica order into all of them (the direct
//! algorithm of the CPU team), and uploads the result. Works for any
//! compute; on the host's compute it is bitwise MirroredStrategy's direct
//! all-reduce.
class HostStagedCollectives final : public DeviceCollectives {
 public:
  HostStagedCollectives(int replicas, CommOptions opts, std::string why)
      : team_(replicas, opts), host_(static_cast<std::size_t>(replicas)), why_(std::move(why)) {}

  void all_reduce_sum(int rank, kernels::Compute& c, float* data, std::size_t n) override {
    auto& mine = host_[static_cast<std::size_t>(rank)];
    mine.resize(n);
    if (n) c.download(mine.data(), data, n * sizeof(float));
    const CallDesc d{.kind = CallKind::all_reduce, .op = OpKind::sum, .dtype = "float32", .in_count = n,
                     .out_count = n, .has_op = true, .algorithm = "host_staged"};
    const std::uint64_t seq = team_.enter(rank, d, mine.data(), mine.data());
    const int p = team_.size();
    std::vector<const float*> in(static_cast<std::size_t>(p));
    std::vector<float*> out(static_cast<std::size_t>(p));
    for (int s = 0; s < p; ++s) {
      out[static_cast<std::size_t>(s)] = static_cast<float*>(team_.slot(s).out);
      in[static_cast<std::size_t>(s)] = out[static_cast<std::size_t>(s)];
    }
    const Range r = shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(rank));
    reduce_range<SumOp>(in.data(), in.size(), out.data(), out.size(), r.begin, r.end, static_cast<std::size_t>(p));
    team_.leave(rank, seq, d);
    if (n) c.upload(data, mine.data(), n * sizeof(float));
  }
  void broadcast(int rank, kernels::Compute& c, float* data, std::size_t n, int root) override {
    auto& mine = host_[static_cast<std::size_t>(rank)];
    mine.resize(n);
    if (rank == root && n) c.download(mine.data(), data, n * sizeof(float));
    const CallDesc d{.kind = CallKind::broadcast, .dtype = "float32", .in_count = n, .out_count = n, .root = root,
                     .algorithm = "host_staged"};
    const std::uint64_t seq = team_.enter(rank, d, mine.data(), mine.data());
    if (rank != root && n) c.upload(data, static_cast<const float*>(team_.slot(root).in), n * sizeof(float));
    team_.leave(rank, seq, d);
  }
  // Each replica reduces (or gathers) into its own host copy, writing only
  // the slice it owns (reduce-scatter) or the slices it does not (all-gather),
  // while the others read theirs: disjoint ranges, no race.
  void reduce_scatter_sum(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    auto& mine = host_[static_cast<std::size_t>(rank)];
    mine.resize(n);
    if (n) c.download(mine.data(), in, n * sizeof(float));
    const Range r = slice(n, rank);
    const CallDesc d{.kind = CallKind::reduce_scatter, .op = OpKind::sum, .dtype = "float32", .in_count = n,
                     .out_count = r.size(), .has_op = true, .algorithm = "host_staged"};
    const std::uint64_t seq = team_.enter(rank, d, mine.data(), mine.data());
    const int p = team_.size();
    std::vector<const float*> ins(static_cast<std::size_t>(p));
    for (int s = 0; s < p; ++s) ins[static_cast<std::size_t>(s)] = static_cast<const float*>(team_.slot(s).in) + r.begin;
    float* o = mine.data() + r.begin;
    reduce_range<SumOp>(ins.data(), ins.size(), &o, 1, 0, r.size(), ins.size());
    team_.leave(rank, seq, d);
    if (r.size()) c.upload(out, mine.data() + r.begin, r.size() * sizeof(float));
  }
  void all_gather(int rank, kernels::Compute& c, const float* in, float* out, std::size_t n) override {
    auto& mine = host_[static_cast<std::size_t>(rank)];
    mine.resize(n);
    const Range r = slice(n, rank);
    if (r.size()) c.download(mine.data() + r.begin, in, r.size() * sizeof(float));
    const CallDesc d{.kind = CallKind::all_gather, .dtype = "float32", .in_count = r.size(), .out_count = n,
                     .algorithm = "host_staged"};
    const std::uint64_t seq = team_.enter(rank, d, mine.data(), mine.data());
    for (int s = 0; s < team_.size(); ++s) {
      if (s == rank) continue;
      const Range theirs = slice(n, s);
      std::copy_n(static_cast<const float*>(team_.slot(s).in) + theirs.begin, theirs.size(), mine.data() + theirs.begin);
    }
    team_.leave(rank, seq, d);
    if (n) c.upload(out, mine.data(), n * sizeof(float));
  }
  void abort(int rank, const std::string& why) override { team_.abort(rank, why); }
  void reset() override { team_.reset(); }
  [[nodiscard]] const std::string& choice() const noexcept override { return why_; }

 private:
  [[nodiscard]] Range slice(std::size_t n, int rank) const {
    return shard_range(n, static_cast<std::size_t>(team_.size()), static_cast<std::size_t>(rank));
  }

  Team team_;
  std::vector<std::vector<float>> host_;  // per replica, its staged copy
  std::string why_;
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
