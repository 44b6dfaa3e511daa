#pragma once
//! The MPI communicator: collectives among processes (ranks), with the
//! collective contract always on. Every call first exchanges a small header
//! with every other rank (sequence number, kind, operation, dtype, element
//! counts, root, algorithm); only when all agree does data move, so ranks
//! that disagree raise CollectiveMismatch together instead of hanging or
//! corrupting memory, and a rank that never arrives is named by the
//! CollectiveTimeout the others raise. Waiting is polling with a deadline:
//! no call blocks for longer than MpiOptions::timeout. After the contract,
//! data moves by non-blocking MPI collectives (MPI_Iallreduce, MPI_Ibcast,
//! ...) waited for under the same deadline, so a rank that stops responding
//! mid-call is named by a CollectiveTimeout too.
//!   auto comm = strata::MpiCommunicator::world();
//!   comm.all_reduce(grad, strata::Sum);                  // algorithm chosen by size
//!   comm.all_reduce(grad, strata::Sum, strata::Ring{});  // or named
//! One thread at a time may call a communicator (MPI_THREAD_SERIALIZED).
//! Point-to-point send/recv (tagged, matched in order, bounded by the same
//! timeout) make it a strata::Communicator.
//! The pieces: exchange.hpp (the contract exchange and the waiting),
//! all_reduce.hpp (the algorithms and the automatic choice),
//! point_to_point.hpp (send and recv).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/comm/mpi/all_reduce.hpp>
#include <strata/comm/mpi/exchange.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/options.hpp>
#include <strata/comm/mpi/point_to_point.hpp>
#include <strata/comm/mpi/runtime.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/communicator.hpp>

namespace strata {

//! Ranks of an MPI job as one communicator: the collectives of the
//! Communicator concept, each checked by the contract and bounded by the timeout.
//!   auto comm = strata::MpiCommunicator::world({.timeout = std::chrono::seconds(30)});
//!   comm.all_reduce(grad, strata::Mean);
//! Reduction order: ring and direct are deterministic (bitwise the same on
//! every rank and run); native follows MPI_Allreduce; AutoReduce is as
//! deterministic as the algorithm auto_choice names.
class MpiCommunicator {
 public:
  //! All ranks of the job (a duplicate of MPI_COMM_WORLD, so strata's messages
  //! never mix with the program's own). Collective: every rank calls it.
  static MpiCommunicator world(MpiOptions opts = {}) {
    detail::mpi::runtime();
    return MpiCommunicator(MPI_COMM_WORLD, std::move(opts));
  }

  MpiCommunicator(MpiCommunicator&&) noexcept = default;
  MpiCommunicator& operator=(MpiCommunicator&&) noexcept = default;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  //! Ranks with the same `color` form a new communicator, ordered by `key`
  //! (then by rank here). Collective, under the contract.
  //! MPI_Comm_split has no non-blocking form: every rank's (color, key) is
  //! first gathered under the deadline, so that it runs only once every rank
  //! is known present (a rank that never arrives is named, not waited for).
  MpiCommunicator split(int color, int key) {
    const std::int64_t mine[2] = {color, key};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(size()));
    all_gather(mine, all);
    ex_.check_still_in_time("MPI_Comm_split");
    MPI_Comm c = MPI_COMM_NULL;
    detail::mpi::check(MPI_Comm_split(ex_.comm(), color, key, &c), "MPI_Comm_split");
    const detail::mpi::CommHandle split_comm = detail::mpi::CommHandle::adopt(c);  // freed once duplicated
    return MpiCommunicator(split_comm, ex_.options());
  }

  [[nodiscard]] int rank() const noexcept { return ex_.rank(); }
  [[nodiscard]] int size() const noexcept { return ex_.size(); }
  [[nodiscard]] const MpiOptions& options() const noexcept { return ex_.options(); }
  [[nodiscard]] MPI_Comm native_handle() const noexcept { return ex_.comm(); }
  //! Whether the ranks exchange data through shared memory (one node, the
  //! shared-memory transport enabled) rather than over a network.
  [[nodiscard]] bool shares_memory() const noexcept { return !ex_.network(); }
  //! Ranks of this communicator on this rank's node (sharing its memory).
  [[nodiscard]] int ranks_on_node() const noexcept { return ex_.node_size(); }
  //! This rank's index among the ranks on its node (its local rank: which GPU it takes).
  [[nodiscard]] int rank_on_node() const noexcept { return ex_.node_rank(); }
  //! Collectives this rank has completed on this communicator.
  [[nodiscard]] std::uint64_t completed() const noexcept { return ex_.completed(); }
  //! Empty while usable; after a timeout or an abort, why it is not.
  [[nodiscard]] const std::string& poisoned() const noexcept { return ex_.poisoned(); }

  //! While `*flag` is true, a waiting collective gives up (CollectiveAborted):
  //! how a strategy releases its MPI leader when a local replica failed.
  void set_interrupt(const std::atomic<bool>* flag) noexcept { ex_.set_interrupt(flag); }

  //! Every rank waits until all have arrived.
  void barrier() {
    const detail::CallDesc d{.kind = detail::CallKind::barrier};
    ex_.done(ex_.enter(d, nullptr, 0));
  }

  //! In-place all-reduce: afterwards every rank's `data` holds the reduction
  //! of all ranks' `data`.
  template <MutableBuffer R, ReduceOperation Op, MpiAllReduceAlgorithm Algo = AutoReduce>
  void all_reduce(R&& data, Op op, Algo algo = {}) {
    using T = detail::buffer_element_t<R>;
    T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    all_reduce_impl(p, p, n, n, op, algo);
  }
  //! Out-of-place all-reduce: `out` (same size as `in`) receives the result.
  template <Buffer In, MutableBuffer Out, ReduceOperation Op, MpiAllReduceAlgorithm Algo = AutoReduce>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void all_reduce(In&& in, Out&& out, Op op, Algo algo = {}) {
    all_reduce_impl(std::ranges::data(in), std::ranges::data(out), std::ranges::size(in), std::ranges::size(out), op,
                    algo);
  }

  //! Copies `root`'s `data` into every rank's `data`.
  template <MutableBuffer R>
  void broadcast(R&& data, int root) {
    using T = detail::buffer_element_t<R>;
    const std::size_t n = std::ranges::size(data);
    const detail::CallDesc d{.kind = detail::CallKind::broadcast, .dtype = dtype_name<T>(), .in_count = n,
                             .out_count = n, .root = root};
    const auto seq = ex_.enter(d, nullptr, 0);
    if (n) {
      const int count = detail::mpi::as_count(n, "broadcast");
      MPI_Request req = MPI_REQUEST_NULL;
      detail::mpi::check(
          MPI_Ibcast(std::ranges::data(data), count, detail::mpi::datatype<T>(), root, ex_.comm(), &req), "MPI_Ibcast");
      ex_.wait_collective(req, "MPI_Ibcast (root rank " + std::to_string(root) + ")");
    }
    ex_.done(seq);
  }

  //! Reduces `in` (same size everywhere) over the ranks and leaves shard
  //! `rank()` of the result in `out`, which must hold
  //! `shard_range(in.size(), size(), rank()).size()` elements.
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void reduce_scatter(In&& in, Out&& out, Op) {
    using T = detail::buffer_element_t<Out>;
    detail::check_op<Op, T>();
    const std::size_t n = std::ranges::size(in);
    const int p = size();
    const detail::CallDesc d{.kind = detail::CallKind::reduce_scatter, .op = Op::kind, .dtype = dtype_name<T>(),
                             .in_count = n, .out_count = std::ranges::size(out), .has_op = true};
    const auto seq = ex_.enter(d, nullptr, 0);
    if (n) {
      std::vector<int>& counts = ex_.counts();  // MPI reads it until the call completes
      counts.resize(static_cast<std::size_t>(p));
      for (int r = 0; r < p; ++r)
        counts[static_cast<std::size_t>(r)] = detail::mpi::as_count(
            shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r)).size(), "reduce_scatter");
      const T* src = std::ranges::data(in);
      T* dst = std::ranges::data(out);
      if (detail::mpi::Exchange::overlaps(src, n, dst, std::ranges::size(out))) src = staged_copy(src, n);
      MPI_Request req = MPI_REQUEST_NULL;
      detail::mpi::check(MPI_Ireduce_scatter(src, dst, counts.data(), detail::mpi::datatype<T>(),
                                             detail::mpi::op_of<Op>(), ex_.comm(), &req),
                         "MPI_Ireduce_scatter");
      ex_.wait_collective(req, "MPI_Ireduce_scatter");
      detail::finalize<Op>(dst, std::ranges::size(out), static_cast<std::size_t>(p));
    }
    ex_.done(seq);
  }

  //! Concatenates every rank's `in` in rank order into each `out`; inputs
  //! may differ in size (the contract carries them), `out` holds their sum.
  template <Buffer In, MutableBuffer Out>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void all_gather(In&& in, Out&& out) {
    using T = detail::buffer_element_t<Out>;
    const int p = size();
    const detail::CallDesc d{.kind = detail::CallKind::all_gather, .dtype = dtype_name<T>(),
                             .in_count = std::ranges::size(in), .out_count = std::ranges::size(out)};
    const auto seq = ex_.enter(d, nullptr, 0);
    std::vector<int>& counts = ex_.counts();  // MPI reads both until the call completes
    std::vector<int>& displs = ex_.displs();
    counts.resize(static_cast<std::size_t>(p));
    displs.resize(static_cast<std::size_t>(p));
    std::size_t off = 0;
    for (int r = 0; r < p; ++r) {
      const auto c = static_cast<std::size_t>(ex_.call_of(r).in_count);
      counts[static_cast<std::size_t>(r)] = detail::mpi::as_count(c, "all_gather");
      displs[static_cast<std::size_t>(r)] = detail::mpi::as_count(off, "all_gather");
      off += c;
    }
    if (off) {
      const T* src = std::ranges::data(in);
      if (detail::mpi::Exchange::overlaps(src, std::ranges::size(in), std::ranges::data(out), off))
        src = staged_copy(src, std::ranges::size(in));
      MPI_Request req = MPI_REQUEST_NULL;
      detail::mpi::check(MPI_Iallgatherv(src, counts[static_cast<std::size_t>(rank())], detail::mpi::datatype<T>(),
                                         std::ranges::data(out), counts.data(), displs.data(),
                                         detail::mpi::datatype<T>(), ex_.comm(), &req),
                         "MPI_Iallgatherv");
      ex_.wait_collective(req, "MPI_Iallgatherv");
    }
    ex_.done(seq);
  }

  //! Sends `data` to rank `peer` under `tag` (0 or more); the peer's
  //! recv(buffer, rank(), tag) of the same count and type takes it. Returns
  //! once the message has left: at once up to 4 KiB, else when the peer's recv
  //! takes it, or raises CollectiveTimeout after the timeout naming the peer
  //! and the tag (like MPI_Send: two ranks that both send large messages to
  //! each other before receiving wait for each other until the timeout).
  //!   comm.send(activations, /*peer=*/1, /*tag=*/7);
  //! An invalid peer (this rank, out of range) or a negative tag is a strata::Error.
  template <Buffer B>
  void send(B&& data, int peer, int tag) {
    detail::mpi::send_message(ex_, std::ranges::data(data), std::ranges::size(data), peer, tag);
  }

  //! Like send, but returns at once with the message (a copy of `data`) on
  //! its way: two ranks may send to each other before either receives.
  //! finish_sends() waits for every message sent so; messages of one peer
  //! and tag arrive in the order sent, whichever form sent them.
  //!   comm.send_async(activations, /*peer=*/1, /*tag=*/0);  ...  comm.finish_sends();
  template <Buffer B>
  void send_async(B&& data, int peer, int tag) {
    async_.push_back(detail::mpi::send_message_async(ex_, std::ranges::data(data), std::ranges::size(data), peer, tag));
  }
  //! Waits until every send_async message has left this rank, or raises
  //! CollectiveTimeout after the timeout naming the peer that took nothing.
  void finish_sends() { detail::mpi::finish_sends(ex_, async_); }

  //! Receives into `data` the next message rank `peer` sent under `tag`
  //! (messages of one peer and tag arrive in the order sent). Raises
  //! CollectiveMismatch naming the peer, the tag and both sizes when its count
  //! or element type differs from `data`'s, CollectiveTimeout naming the peer
  //! and the tag when no message arrives within the timeout; after either,
  //! the communicator stays usable. Abort notices and the interrupt flag end
  //! the wait as they end a collective's.
  //!   comm.recv(grads, /*peer=*/1, /*tag=*/8);
  template <MutableBuffer B>
  void recv(B&& data, int peer, int tag) {
    detail::mpi::recv_message(ex_, std::ranges::data(data), std::ranges::size(data), peer, tag);
  }

  //! The algorithm AutoReduce picks for `bytes` per rank, and why, in a
  //! sentence (the same on every rank: the inputs to the choice are agreed).
  //! With MpiOptions::auto_tune, a size class's first calls measure the
  //! algorithms, and the answer is then the measured fastest (see AutoSelector).
  [[nodiscard]] AutoChoice auto_choice(std::size_t bytes) const { return auto_.explain(ex_, bytes); }

  //! The algorithm auto_choice names, on the hot path (no strings built).
  [[nodiscard]] std::string_view choose(std::size_t bytes) const { return auto_.choose(ex_, bytes); }

  //! Tells every other rank that this one failed (`why`), so that their
  //! collectives on this communicator raise CollectiveAborted carrying it
  //! instead of waiting; this communicator is unusable afterwards. Bounded:
  //! returns within the timeout even if ranks are gone.
  void abort(const std::string& why) { ex_.abort(why); }

 private:
  MpiCommunicator(MPI_Comm parent, MpiOptions opts) : ex_(parent, std::move(opts)), auto_(ex_) {}

  //! `n` elements of `src` copied into the exchange's staging (an input
  //! that overlaps the output; kept alive with the call if it is abandoned).
  template <class T>
  const T* staged_copy(const T* src, std::size_t n) {
    auto& st = ex_.staging();
    if (st.size() < n * sizeof(T)) st.resize(n * sizeof(T));
    std::memcpy(st.data(), src, n * sizeof(T));
    return reinterpret_cast<const T*>(st.data());
  }

  template <class T, ReduceOperation Op, class Algo>
  void all_reduce_impl(const T* in, T* out, std::size_t n, std::size_t out_n, Op, Algo) {
    detail::check_op<Op, T>();
    if constexpr (std::same_as<Algo, AutoReduce>) {
      const std::size_t bytes = n * sizeof(T);
      const auto a = choose(bytes);  // the same decision as auto_choice, without building its reason
      auto run = [&] {
        if (a == Ring::name) detail::mpi::all_reduce_with<Op>(ex_, in, out, n, out_n, Ring{});
        else if (a == Direct::name) detail::mpi::all_reduce_with<Op>(ex_, in, out, n, out_n, Direct{});
        else detail::mpi::all_reduce_with<Op>(ex_, in, out, n, out_n, Native{});
      };
      if (!auto_.measuring(ex_, bytes)) return run();
      const auto t0 = std::chrono::steady_clock::now();
      run();
      auto_.record(ex_, bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    } else {
      detail::mpi::all_reduce_with<Op>(ex_, in, out, n, out_n, Algo{});
    }
  }

  detail::mpi::Exchange ex_;
  detail::mpi::AutoSelector auto_;
  std::vector<detail::mpi::AsyncSend> async_;  // send_async's messages in flight (cancelled first if still there)
};

}  // namespace strata
