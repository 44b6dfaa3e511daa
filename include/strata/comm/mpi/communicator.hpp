#pragma once
//! MpiCommunicator: collectives and tagged send/recv among processes
//! (ranks), with the collective contract always on: every call first
//! exchanges a small header (sequence, kind, operation, dtype, counts,
//! root, algorithm) and moves data only when all ranks agree; every wait is
//! bounded by MpiOptions::timeout. One thread at a time may call a
//! communicator (its owner; headerless messages excepted). The `*_async`
//! forms run on its progress thread, in issue order with its blocking calls.
//!   auto comm = strata::MpiCommunicator::world();
//!   comm.all_reduce(grad, strata::Sum);                  // algorithm chosen by size
//!   comm.all_reduce(grad, strata::Sum, strata::Ring{});  // or named
//!   strata::Work w = comm.all_reduce_async(bucket, strata::Sum);  ...;  w.wait();
//! The pieces: exchange.hpp (the contract exchange), bounded_wait.hpp (the
//! waiting), all_reduce.hpp (the algorithms and the automatic choice),
//! point_to_point.hpp (send, recv, headerless messages), progress.hpp (the
//! order), runtime.hpp (MPI's lifetime, one lock). docs/collectives.md, "Over MPI".

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/comm/collective_forms.hpp>
#include <strata/comm/mpi/all_reduce.hpp>
#include <strata/comm/mpi/collective_work.hpp>
#include <strata/comm/mpi/exchange.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/options.hpp>
#include <strata/comm/mpi/point_to_point.hpp>
#include <strata/comm/mpi/progress.hpp>
#include <strata/comm/mpi/runtime.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/communicator.hpp>
#include <strata/comm/work.hpp>
#include <strata/comm/workers.hpp>

namespace strata {

//! Ranks of an MPI job as one communicator: the collectives of the
//! Communicator concept, each checked by the contract and bounded by the timeout.
//!   auto comm = strata::MpiCommunicator::world({.timeout = std::chrono::seconds(30)});
//!   comm.all_reduce(grad, strata::Mean);
//! Reduction order: ring and direct are deterministic (bitwise the same on
//! every rank and run); native follows MPI_Allreduce; AutoReduce is as
//! deterministic as the algorithm auto_choice names.
class MpiCommunicator : public detail::CollectiveForms<MpiCommunicator> {
 public:
  //! The collectives (barrier, all_reduce, broadcast, reduce_scatter,
  //! all_gather, and their *_async forms: comm/collective_forms.hpp), each
  //! under the contract and the timeout; all_gather's inputs may differ in
  //! size (the contract carries them). A non-blocking form queues the
  //! collective behind this communicator's earlier operations; the progress
  //! thread runs it with the blocking form's code, contract and deadline. A
  //! failure is the Work's typed error; the operations queued behind it then
  //! fail at once with CollectiveAborted (the communicator is unusable).
  //!   strata::Work w = comm.all_reduce_async(bucket, strata::Sum, strata::Ring{});  ...;  w.wait();
  template <class A>
  static constexpr bool takes_algorithm = MpiAllReduceAlgorithm<A>;
  //! What world() takes (the WorkerCommunicator hook: comm/workers.hpp).
  using Options = MpiOptions;

  //! All ranks of the job (a duplicate of MPI_COMM_WORLD, so strata's messages
  //! never mix with the program's own). Collective: every rank calls it.
  static MpiCommunicator world(MpiOptions opts = {}) { return duplicate(MPI_COMM_WORLD, std::move(opts)); }
  //! The ranks of `parent` (a communicator the program made). Collective over them.
  static MpiCommunicator duplicate(MPI_Comm parent, MpiOptions opts = {}) {
    detail::mpi::runtime();
    return MpiCommunicator(parent, std::move(opts));
  }

  //! Moving waits for the source's pending work first.
  MpiCommunicator(MpiCommunicator&& o) noexcept
      : ex_((o.work_.drain(), std::move(o.ex_))), auto_(std::move(o.auto_)), async_(std::move(o.async_)),
        payload_(o.payload_), work_(std::move(o.work_)) {}
  MpiCommunicator& operator=(MpiCommunicator&& o) noexcept {
    if (this != &o) {
      work_.stop();  // ours ends before our MPI state goes
      o.work_.drain();
      const detail::mpi::SerialMpi lock("replacing a communicator", ex_.options().timeout, std::nothrow);
      ex_ = std::move(o.ex_);
      auto_ = std::move(o.auto_);
      async_ = std::move(o.async_);
      payload_ = o.payload_;
      work_ = std::move(o.work_);
    }
    return *this;
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  //! Runs what is still queued (each operation bounded), tells the other
  //! ranks when an exception's stack unwinding destroys it (Exchange::closing:
  //! thrown in the program, outside any strata call), then frees the
  //! communicator under the MPI lock.
  ~MpiCommunicator() {
    work_.stop();
    freeing_.emplace("freeing a communicator", ex_.options().timeout, std::nothrow);
    ex_.closing();
    ex_.keep_if_failed();
  }

  //! Ranks with the same `color` form a new communicator, ordered by `key`
  //! (then by rank here). Collective, under the contract.
  //! MPI_Comm_split has no non-blocking form: every rank's (color, key) is
  //! first gathered under the deadline, so that it runs only once every rank
  //! is known present (a rank that never arrives is named, not waited for).
  MpiCommunicator split(int color, int key) {
    work_.drain();  // in issue order: pending work first
    const detail::mpi::SerialMpi lock("split", ex_.options().timeout);
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
  //! Whether it will never be freed: a notice was sent on it, a collective
  //! abandoned, or this process saw a failure while it lived (notices.hpp).
  [[nodiscard]] bool never_freed() const noexcept { return ex_.never_freed(); }
  //! Its identity, agreed at creation (the same on every rank): its abort notices carry it.
  [[nodiscard]] std::int64_t token() const noexcept { return ex_.token(); }
  //! The error about to be raised, every rank raises from the last call's
  //! result (a run's fingerprint that differs): its unwinding tells no one.
  void agreed_failure() noexcept { ex_.agreed_failure(); }
  //! Whether the ranks exchange data through shared memory (one node, the
  //! shared-memory transport enabled) rather than over a network.
  [[nodiscard]] bool shares_memory() const noexcept { return !ex_.network(); }
  //! Ranks of this communicator on this rank's node (sharing its memory).
  [[nodiscard]] int ranks_on_node() const noexcept { return ex_.node_size(); }
  //! This rank's index among the ranks on its node (its local rank: which GPU it takes).
  [[nodiscard]] int rank_on_node() const noexcept { return ex_.node_rank(); }
  //! Collectives this rank has completed on this communicator (its pending work first).
  [[nodiscard]] std::uint64_t completed() const noexcept { return work_.drain(), ex_.completed(); }
  //! Bytes of element data this rank has handed to collectives on this
  //! communicator (each one's input: elements x element size; its pending
  //! work first): halved when gradients travel as bf16 or fp16.
  [[nodiscard]] std::uint64_t payload_bytes() const noexcept { return work_.drain(), payload_; }
  //! Empty while usable; after a timeout or an abort, why it is not (its pending work first).
  [[nodiscard]] const std::string& poisoned() const noexcept { return work_.drain(), ex_.poisoned(); }

  //! While `*flag` is true, a waiting collective gives up (CollectiveAborted),
  //! pending work included (each queued operation then fails at once):
  //! how a strategy releases its MPI leader when a local replica failed.
  void set_interrupt(const std::atomic<bool>* flag) noexcept {
    work_.drain();
    ex_.set_interrupt(flag);
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
    using T = detail::buffer_element_t<B>;
    const T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    ordered("send", [&] { detail::mpi::send_message(ex_, p, n, peer, tag); }, what<T>("send", n));
  }

  //! Like send, but returns at once with the message (a copy of `data`) on
  //! its way: two ranks may send to each other before either receives.
  //! finish_sends() waits for every message sent so; messages of one peer
  //! and tag arrive in the order sent, whichever form sent them.
  //!   comm.send_async(activations, /*peer=*/1, /*tag=*/0);  ...  comm.finish_sends();
  template <Buffer B>
  void send_async(B&& data, int peer, int tag) {
    using T = detail::buffer_element_t<B>;
    const T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    ordered("send_async", [&] { async_.push_back(detail::mpi::send_message_async(ex_, p, n, peer, tag)); },
            what<T>("send_async", n));
  }
  //! Waits until every send_async message has left this rank, or raises
  //! CollectiveTimeout after the timeout naming the peer that took nothing.
  void finish_sends() {
    ordered("finish_sends", [&] { detail::mpi::finish_sends(ex_, async_); },
            [] { return std::string("finish_sends()"); });
  }

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
    using T = detail::buffer_element_t<B>;
    T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    ordered("recv", [&] { detail::mpi::recv_message(ex_, p, n, peer, tag); }, what<T>("recv", n));
  }

  //! Headerless tagged messages (point_to_point.hpp), for a protocol that frames
  //! its own, as the parameter servers' does: one MPI message each. post_send
  //! and post_recv start one into `r` (its buffer alive until the wait: in
  //! r.keep, on the heap); await waits for all of `r`, probe_tagged for a
  //! message from `source` (MPI_ANY_SOURCE: any) with one of `tags`,
  //! recv_probed receives it whole: each within the timeout, else
  //! CollectiveTimeout(timed_out(the peers that did not answer)), what is not
  //! complete given up with r.keep. Any number of threads may use these at
  //! once (the MPI lock held per MPI call, per look in a wait); no contract, no
  //! abort notices. A tag used for these must not carry send/recv messages too.
  //!   detail::mpi::Requests r;  comm.post_recv(r, reply, n, 1, 7);  comm.post_send(r, ask, 0, 1, 6);
  //!   comm.await(r, [](const std::vector<int>& missing) { return std::string("strata: no reply"); });
  template <detail::mpi::Framed T>
  void post_send(detail::mpi::Requests& r, const T* data, std::size_t n, int peer, int tag) {
    const detail::mpi::SerialMpi lock("post_send", options().timeout);
    detail::mpi::check_endpoint(ex_, "post_send", peer, tag);
    detail::mpi::post_send(ex_.comm(), r, data, n, peer, tag);
  }
  template <detail::mpi::Framed T>
  void post_recv(detail::mpi::Requests& r, T* data, std::size_t n, int peer, int tag) {
    const detail::mpi::SerialMpi lock("post_recv", options().timeout);
    detail::mpi::check_endpoint(ex_, "post_recv", peer, tag);
    detail::mpi::post_recv(ex_.comm(), r, data, n, peer, tag);
  }
  template <class Describe>
  void await(detail::mpi::Requests& r, Describe timed_out) {
    detail::mpi::await_requests(r, options().timeout, std::move(timed_out));
  }
  template <class Describe>
  detail::mpi::Probed probe_tagged(int source, std::span<const int> tags, Describe timed_out) {
    return detail::mpi::probe_tagged(ex_.comm(), source, tags, options().timeout, std::move(timed_out));
  }
  template <detail::mpi::Framed T, class Describe>
  std::vector<T> recv_probed(detail::mpi::Probed& m, Describe timed_out) {
    return detail::mpi::recv_probed<T>(m, options().timeout, std::move(timed_out));
  }

  //! The algorithm AutoReduce picks for `bytes` per rank, and why, in a
  //! sentence (the same on every rank: the inputs to the choice are agreed).
  //! With MpiOptions::auto_tune, a size class's first calls measure the
  //! algorithms, and the answer is then the measured fastest (see AutoSelector).
  [[nodiscard]] AutoChoice auto_choice(std::size_t bytes) const {
    work_.drain();  // the measurements of pending all-reduces first
    return auto_.explain(ex_, bytes);
  }

  //! The algorithm auto_choice names, on the hot path (no strings built).
  [[nodiscard]] std::string_view choose(std::size_t bytes) const {
    work_.drain();
    return auto_.choose(ex_, bytes);
  }

  //! Tells every other rank that this one failed (`why`), so that their
  //! collectives on this communicator raise CollectiveAborted carrying it
  //! instead of waiting; this communicator is unusable afterwards. Bounded:
  //! within the timeout even if ranks are gone. Runs after the pending work
  //! (which the interrupt flag, an abort notice or the deadline ends).
  void abort(const std::string& why) {
    ordered("abort", [&] { ex_.abort(why); }, [] { return std::string("abort()"); });
  }

 private:
  // Creating a communicator calls MPI: under the MPI lock (the temporary
  // lives until the delegated constructor returns).
  MpiCommunicator(MPI_Comm parent, const MpiOptions& opts)
      : MpiCommunicator(detail::mpi::SerialMpi("creating a communicator", opts.timeout), parent, opts) {}
  MpiCommunicator(const detail::mpi::SerialMpi&, MPI_Comm parent, const MpiOptions& opts)
      : ex_(parent, opts), auto_(ex_) {}

  //! Runs `op` in issue order under the MPI lock (progress.hpp).
  template <class Op, class What>
  void ordered(const char* name, Op&& op, What desc) {
    work_.run(name, ex_.options().timeout, std::forward<Op>(op), desc);
  }
  //! Describes an operation for its Work's messages (only when needed) and the trace.
  template <class T>
  static auto what(const char* call, std::size_t n) {
    return detail::Described<T>{call, n};
  }
  friend class detail::CollectiveForms<MpiCommunicator>;
  //! Queues body(*this) behind this communicator's operations (collective_forms.hpp);
  //! the *_now bodies below run on whichever thread runs them (both forms' code).
  template <class What, class Body>
  Work submit_with(const char* name, What desc, Body body) {
    return work_.submit(ex_.rank(), name, ex_.options().timeout, desc,
                        std::function<void()>([this, body = std::move(body)] { body(*this); }));
  }
  void barrier_now() { detail::mpi::barrier_work(ex_); }
  template <class T>
  void broadcast_now(T* p, std::size_t n, int root) {
    payload_ += n * sizeof(T);
    detail::mpi::broadcast_work(ex_, p, n, root);
  }
  template <ReduceOperation Op, class T>
  void reduce_scatter_now(const T* in, std::size_t n, T* out, std::size_t out_n) {
    payload_ += n * sizeof(T);
    detail::mpi::reduce_scatter_work<Op>(ex_, in, n, out, out_n);
  }
  template <class T>
  void all_gather_now(const T* in, std::size_t n, T* out, std::size_t out_n) {
    payload_ += n * sizeof(T);
    detail::mpi::all_gather_work(ex_, in, n, out, out_n);
  }
  template <class T, ReduceOperation Op, class Algo>
  void all_reduce_now(const T* in, T* out, std::size_t n, std::size_t out_n, Op, Algo) {
    detail::check_op<Op, T>();
    payload_ += n * sizeof(T);
    if constexpr (std::same_as<Algo, AutoReduce>) {
      const std::size_t bytes = n * sizeof(T);
      const auto a = auto_.choose(ex_, bytes);  // the same decision as auto_choice, without building its reason
      trace::annotate({"algorithm", a.data()});
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
      trace::annotate({"algorithm", Algo::name.data()});
      detail::mpi::all_reduce_with<Op>(ex_, in, out, n, out_n, Algo{});
    }
  }

  // First declared, so last destroyed: holds the MPI lock (taken by the
  // destructor's body) while the members below free their MPI objects.
  std::optional<detail::mpi::SerialMpi> freeing_;
  detail::mpi::Exchange ex_;
  detail::mpi::AutoSelector auto_;
  std::vector<detail::mpi::AsyncSend> async_;  // send_async's messages in flight (cancelled first if still there)
  std::uint64_t payload_ = 0;  // payload_bytes(): written by whichever thread runs the collectives, in order
  detail::mpi::Progress work_;  // last: its thread ends before anything it uses goes
};

static_assert(AsyncCommunicator<MpiCommunicator>, "MpiCommunicator must model strata::AsyncCommunicator");
static_assert(WorkerCommunicator<MpiCommunicator>, "MpiCommunicator must model strata::WorkerCommunicator");

//! Options of a MultiWorkerMirroredStrategy (strategy/mpi.hpp): across workers (MPI) and within one;
//! what BasicMultiWorkerMirroredStrategy<MpiCommunicator> takes (comm/workers.hpp).
struct MultiWorkerOptions {
  MpiOptions mpi{};
  //! Among a worker's replicas. A replica waiting for its leader's MPI
  //! exchange waits up to this timeout plus mpi.timeout.
  CommOptions local{};
  [[nodiscard]] const MpiOptions& across_options() const noexcept { return mpi; }
};

template <>
struct multi_worker_options<MpiCommunicator> {
  using type = MultiWorkerOptions;
};

}  // namespace strata
