#pragma once
//! How a buffer in a device's memory is summed across workers (processes):
//! what MultiWorkerMirroredStrategy's GPU replicas use after summing among
//! themselves on their devices (mirrored_executor.hpp). Local replica
//! 0 of each worker calls it; the others then take its result on their
//! devices. Two ways, chosen by choose_worker_reduce (comm/gpu_choice.hpp):
//! - HostStagedWorkerSum (every program): download, the strategy's MPI
//!   all-reduce in host memory, upload;
//! - NCCL across workers, one rank per worker on local replica 0's GPU,
//!   where every worker's is its own GPU: registered by <strata/nccl_mpi.hpp>
//!   through nccl_worker_sum() (this header names neither MPI nor NCCL).
//!   auto sum = strategy.make_worker_sum(compute_of_replica_0);   // collective over the workers
//!   sum->all_reduce_sum(compute_of_replica_0, grad, n);          // on local replica 0's thread

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/concepts.hpp>
#include <strata/core/half.hpp>
#include <strata/kernels/compute.hpp>
#include <strata/device/device.hpp>
#include <strata/device/device_collectives.hpp>

namespace strata::detail {

//! The sum of one buffer over every worker. Collective over the workers:
//! one thread per worker calls it, every worker in the same order; waits
//! have the workers' communicator's deadline.
class WorkerSum {
 public:
  virtual ~WorkerSum() = default;
  //! `n` floats at `data` (memory of `c`) become the sum of every worker's.
  virtual void all_reduce_sum(kernels::Compute& c, float* data, std::size_t n) = 0;
  //! The same over `n` elements of a 16-bit format (compression on GPU
  //! replicas), summed in FP32 and rounded to 16 bits at each step.
  virtual void all_reduce_sum(kernels::Compute& c, WireFormat f, void* data, std::size_t n) = 0;
  //! Which way and why (choose_worker_reduce's sentence).
  [[nodiscard]] virtual const std::string& choice() const noexcept = 0;
};

//! The sums over the workers of host memory (the strategy's MPI all-reduce):
//! FP32, and the 16-bit ones of compression.
struct HostSums {
  std::function<void(std::span<float>)> f32;
  std::function<void(std::span<bf16>)> bf;
  std::function<void(std::span<fp16>)> fp;
  //! One generic sum for the three: sum(span) for each element type.
  template <class F>
  static HostSums of(F sum) {
    return {sum, sum, sum};
  }
};

//! Download, the host sum (the strategy's MPI all-reduce between workers),
//! upload. Works for any compute; on the host's compute it is bitwise the
//! CPU workers' hierarchical all-reduce.
class HostStagedWorkerSum final : public WorkerSum {
 public:
  HostStagedWorkerSum(HostSums sums, std::string why) : sums_(std::move(sums)), why_(std::move(why)) {}

  void all_reduce_sum(kernels::Compute& c, float* data, std::size_t n) override {
    staged(c, data, n, sums_.f32, f32_);
  }
  void all_reduce_sum(kernels::Compute& c, WireFormat f, void* data, std::size_t n) override {
    if (f == WireFormat::bf16) return staged(c, static_cast<bf16*>(data), n, sums_.bf, bf_);
    staged(c, static_cast<fp16*>(data), n, sums_.fp, fp_);
  }
  [[nodiscard]] const std::string& choice() const noexcept override { return why_; }

 private:
  //! Through `host`, kept from call to call (a step's gradient: no allocation after the first).
  template <class T>
  static void staged(kernels::Compute& c, T* data, std::size_t n, const std::function<void(std::span<T>)>& sum,
                     std::vector<T>& host) {
    host.resize(n);
    if (n) c.download(host.data(), data, n * sizeof(T));
    sum(std::span<T>(host));
    if (n) c.upload(data, host.data(), n * sizeof(T));
  }

  HostSums sums_;
  std::vector<float> f32_;
  std::vector<bf16> bf_;
  std::vector<fp16> fp_;
  std::string why_;
};

//! What <strata/nccl_mpi.hpp> registers for the workers' communicator type
//! `Comm` (MPI's): given the workers' communicator, local replica 0's device
//! and compute, and the host-staged sum to fall back on, the worker sum
//! (collective over the workers: every worker's GPU is gathered to decide).
template <class Comm>
struct WorkerSumMaker {
  std::unique_ptr<WorkerSum> (*make)(Comm& workers, const Device& leader, kernels::Compute& c,
                                     HostSums host_sums) = nullptr;
};

//! The one maker for workers joined by a `Comm` (none registered: null).
template <class Comm>
WorkerSumMaker<Comm>& nccl_worker_sum() {
  static WorkerSumMaker<Comm> m;
  return m;
}

//! GPU replica r's collectives (of `local` in this process), as the
//! mirrored executor's step calls them: the replica context's calls on its
//! device's memory, over DeviceCollectives `colls` among the local replicas
//! and, across workers (`workers` not null), hierarchical: the local sum on
//! the devices (replica order), replica 0 sums it across workers, the
//! others take its result.
struct DeviceStep {
  DeviceCollectives& colls;
  WorkerSum* workers;
  kernels::Compute& c;
  std::size_t r, local;
  void all_reduce(std::span<float> d, SumOp) {
    const int me = static_cast<int>(r);
    if (!workers) return colls.all_reduce_sum(me, c, d.data(), d.size());
    if (local > 1) colls.all_reduce_sum(me, c, d.data(), d.size());
    if (r == 0) workers->all_reduce_sum(c, d.data(), d.size());
    if (local > 1) colls.broadcast(me, c, d.data(), d.size(), 0);
  }
  //! all_reduce started (a gradient bucket's): the local sum now on the
  //! devices; across workers, replica 0's sum over the workers and the
  //! others' copy of it when the Work is waited for (every replica waits
  //! for its buckets in issue order, so every worker sums them in one order).
  Work all_reduce_async(std::span<float> d, SumOp) {
    const int me = static_cast<int>(r);
    if (!workers) return colls.all_reduce_sum_async(me, c, d.data(), d.size());
    Work local = this->local > 1 ? colls.all_reduce_sum_async(me, c, d.data(), d.size()) : Work{};
    return Work(std::make_unique<FollowedWork>(std::move(local), [step = *this, d]() mutable {
      const int rank = static_cast<int>(step.r);
      if (step.r == 0) step.workers->all_reduce_sum(step.c, d.data(), d.size());
      if (step.local > 1) step.colls.broadcast(rank, step.c, d.data(), d.size(), 0);
    }));
  }
  void broadcast(std::span<float> d, int root) { colls.broadcast(static_cast<int>(r), c, d.data(), d.size(), root); }

  // The 16-bit forms (gradient compression on GPU replicas: compression.hpp), in the same shape.
  template <Half16 T>
  void all_reduce(std::span<T> d, SumOp) {
    if (!workers) return (void)wire(WireCall::Kind::all_reduce, d, d, false);
    if (local > 1) wire(WireCall::Kind::all_reduce, d, d, false);
    across_workers(d);
  }
  template <Half16 T>
  Work all_reduce_async(std::span<T> d, SumOp) {
    if (!workers) return wire(WireCall::Kind::all_reduce, d, d, true);
    Work mine = local > 1 ? wire(WireCall::Kind::all_reduce, d, d, true) : Work{};
    return Work(std::make_unique<FollowedWork>(std::move(mine), [step = *this, d]() mutable {
      step.across_workers(d);
    }));
  }
  template <Half16 T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, SumOp) {
    wire(WireCall::Kind::reduce_scatter, in, out, false);
  }
  //! Started (ZeRO 2 and 3's layers, in one process: the local replicas' slices).
  template <Half16 T>
  Work reduce_scatter_async(std::span<const T> in, std::span<T> out, SumOp) {
    return wire(WireCall::Kind::reduce_scatter, in, out, true);
  }
  void reduce_scatter(std::span<const float> in, std::span<float> out, SumOp) {
    colls.reduce_scatter_sum(static_cast<int>(r), c, in.data(), out.data(), in.size());
  }
  void all_gather(std::span<const float> in, std::span<float> out) {
    colls.all_gather(static_cast<int>(r), c, in.data(), out.data(), out.size());
  }

 private:
  template <class T>
  Work wire(WireCall::Kind kind, std::span<const T> in, std::span<T> out, bool started) {
    return colls.wire(static_cast<int>(r), c,
                      {.kind = kind, .format = wire_format_of<T>, .in = in.data(), .out = out.data(), .n = in.size(),
                       .started = started});
  }
  template <class T>
  Work wire(WireCall::Kind kind, std::span<T> in, std::span<T> out, bool started) {
    return wire(kind, std::span<const T>(in), out, started);
  }
  //! Replica 0's 16-bit sum over the workers, then the other local replicas' copy of it.
  template <class T>
  void across_workers(std::span<T> d) {
    if (r == 0) workers->all_reduce_sum(c, wire_format_of<T>, d.data(), d.size());
    if (local > 1) wire(WireCall::Kind::broadcast, d, d, false);
  }
};

}  // namespace strata::detail
