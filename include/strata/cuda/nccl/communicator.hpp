#pragma once
//! NcclCommunicator: collectives and point-to-point messages between GPUs,
//! one NCCL rank per GPU, over device memory of the communicator's GPU.
//! Every call is enqueued on the CUDA stream given at construction and
//! returns before the data moves: `synchronize()` (or any later work on that
//! stream) waits for it. Models strata::AsyncCommunicator: the `_async`
//! forms return a strata::Work over an event (cuda/comm/event_work.hpp).
//!   strata::NcclTeam team{{0, 1}};                         // one process, GPUs 0 and 1 (team.hpp)
//!   auto comm = team.communicator(replica, stream);        // in replica thread `replica`
//!   comm.all_reduce(grad, strata::Mean);  comm.synchronize();
//!   strata::Work w = comm.all_reduce_async(grad, strata::Sum);  ...;  w.wait();
//! Across processes, one rank per process: NcclCommunicator::world (world.hpp, needs strata-mpi).
//! The contract (calls agreed on the host before NCCL runs, every wait
//! polled under CommOptions::timeout, ncclCommAbort and CollectiveAborted
//! after a failure, NCCL's reduction order, a Work waited for before its
//! communicator goes): docs/collectives.md, "On GPUs".

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ranges>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/communicator.hpp>
#include <strata/cuda/nccl/contract.hpp>
#include <strata/cuda/nccl/error.hpp>
#include <strata/cuda/nccl/rank.hpp>
#include <strata/cuda/nccl/session.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/communicator.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/core/partition.hpp>

namespace strata {

class MpiCommunicator;
class NcclTeam;

//! One NCCL rank's handle on its communicator: the collectives of the
//! Communicator concept and tagged send / recv, over device memory of its
//! GPU, enqueued on its stream. Made by NcclTeam::communicator (ranks are
//! replica threads of one process) or NcclCommunicator::world (one rank per
//! MPI process). One thread at a time uses a communicator; a team's
//! communicators must not outlive their team.
//!   auto comm = team.communicator(0, stream);
//!   comm.reduce_scatter(grad, shard, strata::Sum);  comm.all_gather(shard, grad);  comm.synchronize();
class NcclCommunicator {
 public:
  //! Every rank of an MPI job as one NCCL communicator, this rank on GPU
  //! `device` with its calls on `stream` (a stream of that GPU). Collective
  //! over `mpi`. Before NCCL is initialized, every rank's GPU (host, index,
  //! UUID) is gathered and two ranks on one GPU raise strata::Error on every
  //! rank, naming them. Defined in strata/cuda/nccl/world.hpp (strata-mpi).
  //!   auto mpi = strata::MpiCommunicator::world();
  //!   auto comm = strata::NcclCommunicator::world(mpi, local_rank, stream.get());
  static inline NcclCommunicator world(MpiCommunicator& mpi, int device, cudaStream_t stream, CommOptions opts = {});

  NcclCommunicator(NcclCommunicator&&) noexcept = default;
  NcclCommunicator& operator=(NcclCommunicator&&) noexcept = default;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() = default;

  //! This rank's index, 0 .. size() - 1 (the replica's index in a team).
  [[nodiscard]] int rank() const noexcept { return s_.rank().rank(); }
  //! The number of ranks (GPUs).
  [[nodiscard]] int size() const noexcept { return s_.rank().size(); }
  //! The CUDA device (GPU) of this rank, which every buffer must live on.
  [[nodiscard]] int device() const noexcept { return s_.rank().device(); }
  //! The stream every call of this communicator is enqueued on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return s_.stream(); }
  //! The NCCL communicator (null once aborted or closed).
  [[nodiscard]] ncclComm_t native_handle() const noexcept { return s_.comm(); }
  //! The options its waits run under (CommOptions::timeout).
  [[nodiscard]] const CommOptions& options() const noexcept { return s_.options(); }
  //! Empty while usable; after a timeout or a failure, the first one.
  //!   if (!comm.failure().empty()) std::cerr << comm.failure();
  [[nodiscard]] const std::string& failure() const noexcept { return s_.rank().failure(); }

  //! Every rank waits on the host until all have called it, and the
  //! stream's later work waits on the device for every rank's earlier work
  //! (a one-element all-reduce).
  //!   comm.barrier();
  void barrier() {
    s_.begin("barrier");
    const detail::CallDesc d{};
    const auto seq = s_.agree(d, nullptr);
    void* flag = nullptr;
    s_.enqueue(s_.collective(seq, d), "ncclAllReduce", [&] {
      cuda::check(cudaMallocAsync(&flag, sizeof(std::int32_t), stream()), "cudaMallocAsync");
      return ncclAllReduce(flag, flag, 1, ncclInt32, ncclSum, s_.comm(), stream());
    }, [&] { cuda::check(cudaFreeAsync(flag, stream()), "cudaFreeAsync"); });
  }

  //! In-place all-reduce of device memory: afterwards every rank's `data`
  //! holds the reduction of all ranks' `data` (once the stream gets there).
  //!   comm.all_reduce(std::span<float>(grad_dev, n), strata::Mean);   // ncclAvg
  template <MutableBuffer R, ReduceOperation Op>
  void all_reduce(R&& data, Op) {
    using T = detail::buffer_element_t<R>;
    detail::check_op<Op, T>();
    T* p = std::ranges::data(data);
    all_reduce_impl<T, Op>(p, p, std::ranges::size(data), std::ranges::size(data));
  }
  //! Out-of-place all-reduce: `out` (same size as `in`) receives the result.
  //!   comm.all_reduce(in_dev, out_dev, strata::Max);
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void all_reduce(In&& in, Out&& out, Op) {
    using T = detail::buffer_element_t<Out>;
    detail::check_op<Op, T>();
    all_reduce_impl<T, Op>(std::ranges::data(in), std::ranges::data(out), std::ranges::size(in),
                           std::ranges::size(out));
  }

  //! Copies `root`'s `data` into every rank's `data`.
  //!   comm.broadcast(weights_dev, /*root=*/0);
  template <MutableBuffer R>
  void broadcast(R&& data, int root) {
    using T = detail::buffer_element_t<R>;
    s_.begin("broadcast");
    T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    s_.check_memory(p, n * sizeof(T), "broadcast");
    const detail::CallDesc d{.kind = detail::CallKind::broadcast, .dtype = dtype_name<T>(), .in_count = n,
                             .out_count = n, .root = root};
    const auto seq = s_.agree(d, nullptr);
    if (n == 0) return;
    s_.enqueue(s_.collective(seq, d), "ncclBroadcast",
               [&] { return ncclBroadcast(p, p, n, detail::nccl::datatype<T>(), root, s_.comm(), stream()); });
  }

  //! Reduces `in` (same size on every rank) and leaves shard `rank()` of the
  //! result in `out`, which holds `shard_range(in.size(), size(), rank()).size()`
  //! elements: ncclReduceScatter when the shards are equal, else one
  //! ncclReduce per shard, grouped. `out` may be `in`'s own shard (in place)
  //! but must not overlap it otherwise.
  //!   comm.reduce_scatter(grad_dev, shard_dev, strata::Sum);
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void reduce_scatter(In&& in, Out&& out, Op) {
    using T = detail::buffer_element_t<Out>;
    detail::check_op<Op, T>();
    s_.begin("reduce_scatter");
    const T* src = std::ranges::data(in);
    T* dst = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in);
    s_.check_memory(src, n * sizeof(T), "reduce_scatter input");
    s_.check_memory(dst, std::ranges::size(out) * sizeof(T), "reduce_scatter output");
    const detail::CallDesc d{.kind = detail::CallKind::reduce_scatter, .op = Op::kind, .dtype = dtype_name<T>(),
                             .in_count = n, .out_count = std::ranges::size(out), .has_op = true};
    const auto seq = s_.agree(d, nullptr);
    if (n == 0) return;
    const auto p = static_cast<std::size_t>(size());
    constexpr ncclDataType_t type = detail::nccl::datatype<T>();
    constexpr ncclRedOp_t op = detail::nccl::red_op<Op>();
    if (n % p == 0) {
      s_.enqueue(s_.collective(seq, d), "ncclReduceScatter",
                 [&] { return ncclReduceScatter(src, dst, n / p, type, op, s_.comm(), stream()); });
      return;
    }
    s_.enqueue(s_.collective(seq, d), "ncclReduce (one per shard, grouped)", [&] {
      return s_.grouped([&] {
        for (std::size_t r = 0; r < p; ++r) {
          const Range s = shard_range(n, p, r);
          if (s.size() == 0) continue;  // every rank skips the same empty shards
          const bool mine = static_cast<int>(r) == rank();
          const ncclResult_t res = ncclReduce(src + s.begin, mine ? dst : nullptr, s.size(), type, op,
                                              static_cast<int>(r), s_.comm(), stream());
          if (res != ncclSuccess && res != ncclInProgress) return res;
        }
        return ncclSuccess;
      });
    });
  }

  //! Concatenates every rank's `in` in rank order into each `out`; inputs
  //! may differ in size (the contract carries every rank's count), `out`
  //! holds their sum: ncclAllGather when the counts are equal, else one
  //! ncclBroadcast per rank, grouped.
  //!   comm.all_gather(shard_dev, full_dev);
  template <Buffer In, MutableBuffer Out>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void all_gather(In&& in, Out&& out) {
    using T = detail::buffer_element_t<Out>;
    s_.begin("all_gather");
    const T* src = std::ranges::data(in);
    T* dst = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in), total = std::ranges::size(out);
    s_.check_memory(src, n * sizeof(T), "all_gather input");
    s_.check_memory(dst, total * sizeof(T), "all_gather output");
    const detail::CallDesc d{.kind = detail::CallKind::all_gather, .dtype = dtype_name<T>(), .in_count = n,
                             .out_count = total};
    const auto seq = s_.agree(d, &counts_);
    if (total == 0) return;
    constexpr ncclDataType_t type = detail::nccl::datatype<T>();
    bool equal = true;
    for (std::size_t c : counts_) equal = equal && c == counts_[0];
    if (equal) {
      s_.enqueue(s_.collective(seq, d), "ncclAllGather",
                 [&] { return ncclAllGather(src, dst, counts_[0], type, s_.comm(), stream()); });
      return;
    }
    s_.enqueue(s_.collective(seq, d), "ncclBroadcast (one per rank, grouped)", [&] {
      return s_.grouped([&] {
        std::size_t off = 0;
        for (int r = 0; r < size(); ++r) {
          const std::size_t c = counts_[static_cast<std::size_t>(r)];
          if (c != 0) {  // every rank skips the same empty inputs
            const ncclResult_t res = ncclBroadcast(src, dst + off, c, type, r, s_.comm(), stream());
            if (res != ncclSuccess && res != ncclInProgress) return res;
          }
          off += c;
        }
        return ncclSuccess;
      });
    });
  }

  //! Sends `data` to rank `peer` under `tag` (>= 0): announces it to the
  //! peer on the host and enqueues ncclSend. Returns without waiting for the
  //! receiver, but on the device the stream waits for the peer's recv (NCCL
  //! matches two ranks' messages in the order sent, and its sends are not
  //! buffered: a send whose recv the peer enqueues only after a collective
  //! that needs this stream's later work waits until the timeout).
  //!   comm.send(activations_dev, comm.rank() + 1, /*tag=*/0);
  template <Buffer B>
  void send(B&& data, int peer, int tag) {
    using T = detail::buffer_element_t<B>;
    s_.begin("send");
    s_.check_peer("send", peer, tag);
    const T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    s_.check_memory(p, n * sizeof(T), "send");
    s_.post(peer, detail::nccl::Header{.tag = tag, .count = static_cast<std::int64_t>(n),
                                       .dtype = detail::nccl::dtype_code<T>()});
    if (n == 0) return;  // the receiver skips it too: the header says 0
    s_.enqueue(s_.message("send(to", peer, tag, n, dtype_name<T>()), "ncclSend",
               [&] { return ncclSend(p, n, detail::nccl::datatype<T>(), peer, s_.comm(), stream()); });
  }

  //! Receives into `data` the next message rank `peer` sent to this rank;
  //! its tag, element type and count must be `tag`'s and `data`'s, else
  //! CollectiveMismatch: a wrong size or type drops the message (its data is
  //! taken into scratch memory so later messages stay matched); a different
  //! tag leaves it for the recv with that tag (NCCL delivers a pair's
  //! messages in send order, so tags cannot be received out of that order).
  //! No message within the timeout is CollectiveTimeout naming the peer and
  //! the tag; the communicator stays usable after either.
  //!   comm.recv(activations_dev, comm.rank() - 1, /*tag=*/0);
  template <MutableBuffer B>
  void recv(B&& data, int peer, int tag) {
    using T = detail::buffer_element_t<B>;
    s_.begin("recv");
    s_.check_peer("recv", peer, tag);
    T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    s_.check_memory(p, n * sizeof(T), "recv");
    const std::string what = s_.message("recv(from", peer, tag, n, dtype_name<T>());
    const detail::nccl::Header h = s_.take(peer, what);
    const auto code = static_cast<std::size_t>(h.dtype & 3);
    const std::string sent = std::to_string(h.count) + " " + std::string(detail::nccl::dtype_names[code]);
    if (h.tag != tag) {
      s_.keep(peer, h);
      throw CollectiveMismatch(s_.who() + ": " + what + ": the next message rank " + std::to_string(peer) +
                               " sent to this rank has tag " + std::to_string(h.tag) + " (" + sent +
                               "); NCCL delivers the messages of two ranks in the order sent, so receive them in "
                               "that order (the message stays for a recv with tag " + std::to_string(h.tag) + ")");
    }
    if (h.count != static_cast<std::int64_t>(n) || h.dtype != detail::nccl::dtype_code<T>()) {
      if (h.count > 0) s_.drain(h, peer, what);
      throw CollectiveMismatch(s_.who() + ": " + what + " expected " + std::to_string(n) + " " +
                               std::string(dtype_name<T>()) + " but rank " + std::to_string(peer) + " sent " + sent +
                               " (the message is dropped; sender and receiver must agree on size and type)");
    }
    if (n == 0) return;
    s_.enqueue(what, "ncclRecv",
               [&] { return ncclRecv(p, n, detail::nccl::datatype<T>(), peer, s_.comm(), stream()); });
  }

  //! The non-blocking forms (see the top of this header): the blocking
  //! call's agreement and enqueueing, then a Work over the GPU's completion.
  //!   auto w = comm.reduce_scatter_async(grad, shard, strata::Sum);  w.wait();
  template <MutableBuffer R, ReduceOperation Op>
  Work all_reduce_async(R&& data, Op op) {
    return async("all_reduce_async", [&] { all_reduce(data, op); });
  }
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  Work all_reduce_async(In&& in, Out&& out, Op op) {
    return async("all_reduce_async", [&] { all_reduce(in, out, op); });
  }
  template <MutableBuffer R>
  Work broadcast_async(R&& data, int root) {
    return async("broadcast_async", [&] { broadcast(data, root); });
  }
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  Work reduce_scatter_async(In&& in, Out&& out, Op op) {
    return async("reduce_scatter_async", [&] { reduce_scatter(in, out, op); });
  }
  template <Buffer In, MutableBuffer Out>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  Work all_gather_async(In&& in, Out&& out) {
    return async("all_gather_async", [&] { all_gather(in, out); });
  }
  Work barrier_async() {
    return async("barrier_async", [&] { barrier(); });
  }

  //! Waits until the last operation enqueued by this communicator has
  //! completed on the GPU, polling its event and NCCL's asynchronous errors
  //! under CommOptions::timeout. A timeout (a peer that never joined the
  //! collective on its GPU, a send whose recv never came) or an NCCL error
  //! aborts the communicator: CollectiveTimeout naming the operation, its
  //! sequence number and this rank, or NcclError.
  //!   comm.all_reduce(grad, strata::Sum);  comm.synchronize();   // grad is reduced now
  void synchronize() { s_.synchronize(); }

 private:
  //! The blocking call `enqueue` (agreement, then its work queued on the
  //! stream), and the Work over what it enqueued (session.hpp's work()).
  template <class F>
  Work async(const char* call, F&& enqueue) {
    const auto before = s_.enqueued();
    enqueue();
    return s_.work(call, before);
  }

  friend class NcclTeam;

  NcclCommunicator(detail::nccl::Rank* rank, std::unique_ptr<detail::nccl::Rank> owned,
                   std::unique_ptr<detail::nccl::Contract> contract, cudaStream_t stream, CommOptions opts)
      : s_(rank, std::move(owned), std::move(contract), stream, opts) {}

  template <class T, class Op>
  void all_reduce_impl(const T* in, T* out, std::size_t n, std::size_t out_n) {
    s_.begin("all_reduce");
    s_.check_memory(in, n * sizeof(T), "all_reduce input");
    s_.check_memory(out, out_n * sizeof(T), "all_reduce output");
    const detail::CallDesc d{.kind = detail::CallKind::all_reduce, .op = Op::kind, .dtype = dtype_name<T>(),
                             .in_count = n, .out_count = out_n, .has_op = true};
    const auto seq = s_.agree(d, nullptr);
    if (n == 0) return;
    s_.enqueue(s_.collective(seq, d), "ncclAllReduce", [&] {
      return ncclAllReduce(in, out, n, detail::nccl::datatype<T>(), detail::nccl::red_op<Op>(), s_.comm(), stream());
    });
  }

  detail::nccl::Session s_;
  std::vector<std::size_t> counts_;  // all_gather: every rank's input count
};

static_assert(AsyncCommunicator<NcclCommunicator>, "NcclCommunicator must model strata::AsyncCommunicator");

}  // namespace strata
