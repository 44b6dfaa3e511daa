#pragma once
//! The MPI communicator: collectives among processes (ranks), with the
//! collective contract always on. Every call first exchanges a small header
//! with every other rank (sequence number, kind, operation, dtype, element
//! counts, root, algorithm); only when all agree does data move, so ranks
//! that disagree raise CollectiveMismatch together instead of hanging or
//! corrupting memory, and a rank that never arrives is named by the
//! CollectiveTimeout the others raise. Waiting is polling with a deadline:
//! no call blocks for longer than MpiOptions::timeout.
//!   auto comm = strata::MpiCommunicator::world();
//!   comm.all_reduce(grad, strata::Sum);                  // algorithm chosen by size
//!   comm.all_reduce(grad, strata::Sum, strata::Ring{});  // or named
//! One thread at a time may call a communicator (MPI_THREAD_SERIALIZED).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <strata/comm/algorithm/direct.hpp>
#include <strata/comm/algorithm/native.hpp>
#include <strata/comm/algorithm/ring.hpp>
#include <strata/comm/mpi/contract.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/options.hpp>
#include <strata/comm/mpi/runtime.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/communicator.hpp>

namespace strata {

//! An algorithm a caller may name for one MPI all-reduce.
template <class A>
concept MpiAllReduceAlgorithm = std::same_as<A, Ring> || std::same_as<A, Direct> || std::same_as<A, Native> ||
                                std::same_as<A, AutoReduce>;

//! What AutoReduce picks for a message size, and why.
struct AutoChoice {
  std::string_view algorithm;
  std::string reason;
};

class MpiCommunicator;

namespace detail::mpi {

enum Tag : int { tag_call = 1, tag_ring = 2, tag_abort = 3, tag_data = 4 };

template <ReduceOperation Op>
MPI_Op op_of() noexcept {
  if constexpr (Op::kind == OpKind::min) return MPI_MIN;
  else if constexpr (Op::kind == OpKind::max) return MPI_MAX;
  else if constexpr (Op::kind == OpKind::product) return MPI_PROD;
  else return MPI_SUM;  // sum, and mean before its division
}

//! Requests of a collective in flight: whatever is still pending when the
//! collective fails is cancelled (receives) or released (sends).
struct Pending {
  std::vector<MPI_Request> reqs;
  Pending() = default;
  Pending(Pending&& o) noexcept : reqs(std::move(o.reqs)) { o.reqs.clear(); }
  Pending& operator=(Pending&& o) noexcept {
    if (this != &o) {
      cancel();
      reqs = std::move(o.reqs);
      o.reqs.clear();
    }
    return *this;
  }
  ~Pending() { cancel(); }
  //! Cancels `p`'s requests when the scope is left by an exception (the
  //! communicator's reused request lists, kept between calls to avoid allocating).
  struct OnThrow {
    Pending& p;
    int live = std::uncaught_exceptions();
    ~OnThrow() {
      if (std::uncaught_exceptions() > live) p.cancel();
    }
  };
  void cancel() noexcept {
    for (auto& r : reqs) {
      if (r == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Cancel(&r);
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      }
    }
    reqs.clear();
  }
};

//! An owned communicator: freed when destroyed (unless MPI is already
//! finalized), handed over when moved. Converts to MPI_Comm for MPI calls.
class CommHandle {
 public:
  CommHandle() = default;
  CommHandle(CommHandle&& o) noexcept : c_(std::exchange(o.c_, MPI_COMM_NULL)) {}
  CommHandle& operator=(CommHandle&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = std::exchange(o.c_, MPI_COMM_NULL);
    }
    return *this;
  }
  ~CommHandle() { reset(); }
  operator MPI_Comm() const noexcept { return c_; }  // NOLINT: used as the handle it wraps
  //! Where MPI_Comm_idup writes the new communicator.
  MPI_Comm* out() noexcept { return &c_; }

 private:
  void reset() noexcept {
    int fin = 0;
    MPI_Finalized(&fin);
    if (c_ != MPI_COMM_NULL && !fin) MPI_Comm_free(&c_);
    c_ = MPI_COMM_NULL;
  }
  MPI_Comm c_ = MPI_COMM_NULL;
};

template <class T>
class MpiRingLink;

}  // namespace detail::mpi

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
  MpiCommunicator split(int color, int key) {
    const detail::CallDesc d{.kind = detail::CallKind::barrier};
    const auto seq = enter(d, nullptr, 0);
    MPI_Comm c = MPI_COMM_NULL;
    detail::mpi::check(MPI_Comm_split(comm_, color, key, &c), "MPI_Comm_split");
    done(seq);
    MpiCommunicator out(c, opts_);
    MPI_Comm_free(&c);
    return out;
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] const MpiOptions& options() const noexcept { return opts_; }
  [[nodiscard]] MPI_Comm native_handle() const noexcept { return comm_; }
  //! Whether the ranks exchange data through shared memory (one node, the
  //! shared-memory transport enabled) rather than over a network.
  [[nodiscard]] bool shares_memory() const noexcept { return !network_; }
  //! Ranks of this communicator on this rank's node (sharing its memory).
  [[nodiscard]] int ranks_on_node() const noexcept { return node_size_; }
  //! Collectives this rank has completed on this communicator.
  [[nodiscard]] std::uint64_t completed() const noexcept { return completed_; }
  //! Empty while usable; after a timeout or an abort, why it is not.
  [[nodiscard]] const std::string& poisoned() const noexcept { return poisoned_; }

  //! While `*flag` is true, a waiting collective gives up (CollectiveAborted):
  //! how a strategy releases its MPI leader when a local replica failed.
  void set_interrupt(const std::atomic<bool>* flag) noexcept { interrupt_ = flag; }

  //! Every rank waits until all have arrived.
  void barrier() {
    const detail::CallDesc d{.kind = detail::CallKind::barrier};
    done(enter(d, nullptr, 0));
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
    const auto seq = enter(d, nullptr, 0);
    if (n) {
      const int count = detail::mpi::as_count(n, "broadcast");
      detail::mpi::check(MPI_Bcast(std::ranges::data(data), count, detail::mpi::datatype<T>(), root, comm_), "MPI_Bcast");
    }
    done(seq);
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
    const detail::CallDesc d{.kind = detail::CallKind::reduce_scatter, .op = Op::kind, .dtype = dtype_name<T>(),
                             .in_count = n, .out_count = std::ranges::size(out), .has_op = true};
    const auto seq = enter(d, nullptr, 0);
    if (n) {
      std::vector<int> counts(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_; ++r)
        counts[static_cast<std::size_t>(r)] = detail::mpi::as_count(
            shard_range(n, static_cast<std::size_t>(size_), static_cast<std::size_t>(r)).size(), "reduce_scatter");
      const T* src = std::ranges::data(in);
      T* dst = std::ranges::data(out);
      std::vector<T> copy;
      if (overlaps(src, n, dst, std::ranges::size(out))) {  // MPI forbids aliased send and receive buffers
        copy.assign(src, src + n);
        src = copy.data();
      }
      detail::mpi::check(MPI_Reduce_scatter(src, dst, counts.data(), detail::mpi::datatype<T>(),
                                            detail::mpi::op_of<Op>(), comm_),
                         "MPI_Reduce_scatter");
      detail::finalize<Op>(dst, std::ranges::size(out), static_cast<std::size_t>(size_));
    }
    done(seq);
  }

  //! Concatenates every rank's `in` in rank order into each `out`; inputs
  //! may differ in size (the contract carries them), `out` holds their sum.
  template <Buffer In, MutableBuffer Out>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void all_gather(In&& in, Out&& out) {
    using T = detail::buffer_element_t<Out>;
    const detail::CallDesc d{.kind = detail::CallKind::all_gather, .dtype = dtype_name<T>(),
                             .in_count = std::ranges::size(in), .out_count = std::ranges::size(out)};
    const auto seq = enter(d, nullptr, 0);
    std::vector<int> counts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
    std::size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const std::size_t c = static_cast<std::size_t>(calls_[static_cast<std::size_t>(r)].in_count);
      counts[static_cast<std::size_t>(r)] = detail::mpi::as_count(c, "all_gather");
      displs[static_cast<std::size_t>(r)] = detail::mpi::as_count(off, "all_gather");
      off += c;
    }
    if (off) {
      const T* src = std::ranges::data(in);
      std::vector<T> copy;
      if (overlaps(src, std::ranges::size(in), std::ranges::data(out), off)) {
        copy.assign(src, src + std::ranges::size(in));
        src = copy.data();
      }
      detail::mpi::check(MPI_Allgatherv(src, counts[static_cast<std::size_t>(rank_)], detail::mpi::datatype<T>(),
                                        std::ranges::data(out), counts.data(), displs.data(),
                                        detail::mpi::datatype<T>(), comm_),
                         "MPI_Allgatherv");
    }
    done(seq);
  }

  //! The algorithm AutoReduce picks for `bytes` per rank, and why (the same
  //! on every rank: the inputs to the choice are agreed at construction).
  [[nodiscard]] AutoChoice auto_choice(std::size_t bytes) const {
    const std::string_view a = choose(bytes);  // the rules; what follows only explains them
    if (!forced_.empty()) return {a, "forced by " + force_source_ + "=" + std::string(a)};
    if (size_ == 1) return {a, "one rank: nothing to exchange"};
    const std::string sz = std::to_string(bytes) + " B", net = network_ ? "net " : "shm ";
    const std::string where = network_ ? "over a network (" + network_why_ + ")" : "in shared memory";
    if (a == Direct::name)
      return {a, sz + " <= direct_max_bytes_" + net + std::to_string(direct_max()) + ", ranks talk " + where +
                     ": one exchange carries the contract and the data"};
    if (a == Ring::name)
      return {a, sz + " >= ring_min_bytes_" + net + std::to_string(ring_min()) + ", ranks talk " + where +
                     ": the ring's pipelined steps beat MPI_Allreduce there"};
    return {a, sz + " between the direct and ring thresholds, ranks talk " + where + ": MPI_Allreduce"};
  }

  //! The algorithm auto_choice names, on the hot path (no strings built).
  [[nodiscard]] std::string_view choose(std::size_t bytes) const {
    if (!force_error_.empty()) throw Error(force_error_);
    if (!forced_.empty()) return forced_;
    if (size_ == 1 || bytes <= direct_max()) return Direct::name;
    if (ring_min() != 0 && bytes >= ring_min()) return Ring::name;
    return Native::name;
  }

  //! Tells every other rank that this one failed (`why`), so that their
  //! collectives on this communicator raise CollectiveAborted carrying it
  //! instead of waiting; this communicator is unusable afterwards. Bounded:
  //! returns within the timeout even if ranks are gone.
  void abort(const std::string& why) {
    if (remote_abort_) return;  // the failure came from another rank, which told everyone
    if (poisoned_.empty()) poison("rank " + std::to_string(rank_) + " aborted: " + why);
    if (abort_sent_) return;
    abort_sent_ = true;
    const std::string msg = why.substr(0, 2000);  // small: sent eagerly, so it leaves even if nobody receives yet
    detail::mpi::Pending sends;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) {
        sends.reqs.push_back(MPI_REQUEST_NULL);
        MPI_Isend(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, r, detail::mpi::tag_abort, comm_,
                  &sends.reqs.back());
      }
    const auto deadline = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(opts_.timeout, std::chrono::seconds(2));
    for (int i = 0; std::chrono::steady_clock::now() < deadline; ++i) {
      int all = 0;
      MPI_Testall(static_cast<int>(sends.reqs.size()), sends.reqs.data(), &all, MPI_STATUSES_IGNORE);
      if (all) break;
      relax(i);
    }
  }

 private:
  template <class T>
  friend class detail::mpi::MpiRingLink;

  MpiCommunicator(MPI_Comm parent, MpiOptions opts) : opts_(std::move(opts)) {
    // Non-blocking duplicate, so that a rank that never calls this is reported, not waited for.
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi::check(MPI_Comm_idup(parent, comm_.out(), &req), "MPI_Comm_idup");
    const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    for (int i = 0;; ++i) {
      int flag = 0;
      MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (flag) break;
      if (std::chrono::steady_clock::now() > deadline) {
        detail::mpi::runtime().note_failure(opts_.timeout);
        throw CollectiveTimeout("strata: creating an MPI communicator timed out after " +
                                std::to_string(opts_.timeout.count()) + " ms: not every rank created it");
      }
      relax(i);
    }
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    std::string forced = opts_.force_algorithm;
    force_source_ = "MpiOptions::force_algorithm";
    if (forced.empty())
      if (const char* e = std::getenv("STRATA_MPI_ALLREDUCE"); e && *e) {
        forced = e;
        force_source_ = "STRATA_MPI_ALLREDUCE";
      }
    if (!forced.empty()) {
      for (std::string_view a : {Ring::name, Direct::name, Native::name})
        if (forced == a) forced_ = a;
      if (forced_.empty())
        force_error_ = "strata: " + force_source_ + "=" + forced + " names no all-reduce algorithm (ring, direct, native)";
    }
    last_seen_.assign(static_cast<std::size_t>(size_), 0);
    inbox_.resize(static_cast<std::size_t>(size_));
    calls_.resize(static_cast<std::size_t>(size_));
    // Shared memory or network? Every rank must choose the same algorithms, so
    // the answer is agreed: network if any rank sees one.
    MPI_Comm node = MPI_COMM_NULL;
    detail::mpi::check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                       "MPI_Comm_split_type");
    MPI_Comm_size(node, &node_size_);
    MPI_Comm_free(&node);
    int flags[2] = {node_size_ < size_ ? 1 : 0, 0};
    if (const char* btl = std::getenv("OMPI_MCA_btl"); btl && *btl) {
      // shared memory is off when "^..." excludes it, or a plain list leaves it out
      const std::string b = btl;
      const bool names_shm = b.find("vader") != std::string::npos || b.find("sm") != std::string::npos;
      flags[1] = (b[0] == '^') == names_shm ? 1 : 0;
    }
    int any[2] = {0, 0};
    detail::mpi::check(MPI_Allreduce(flags, any, 2, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce");
    network_ = any[0] || any[1];
    network_why_ = any[0] ? "ranks span several nodes" : any[1] ? "shared memory transport disabled (OMPI_MCA_btl)" : "";
  }

  //! The automatic choice's thresholds for this communicator's transport.
  [[nodiscard]] std::size_t direct_max() const noexcept {
    return network_ ? opts_.direct_max_bytes_net : opts_.direct_max_bytes_shm;
  }
  [[nodiscard]] std::size_t ring_min() const noexcept {
    return network_ ? opts_.ring_min_bytes_net : opts_.ring_min_bytes_shm;
  }

  //! The direct algorithm's separate payload travels in messages of at most
  //! this size: over TCP under Open MPI's eager limit (64 KiB), so that they
  //! leave at once instead of waiting for the receiver's handshake; in
  //! shared memory as one message (the single-copy path is faster).
  [[nodiscard]] std::size_t payload_block() const noexcept {
    return network_ ? std::size_t{32} << 10 : SIZE_MAX;
  }
  //! f(offset, length) for each message of a separate payload of `bytes`:
  //! sender and receiver split it alike.
  template <class F>
  void each_block(std::size_t bytes, F f) const {
    for (std::size_t off = 0; off < bytes; off += payload_block()) f(off, std::min(payload_block(), bytes - off));
  }

  static bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
    const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
    return an && bn && x < y + bn && y < x + an;
  }

  static void relax(int i) noexcept {
    if (i > 2000) std::this_thread::yield();  // more ranks than cores: let the awaited one run
  }

  template <class T, ReduceOperation Op, class Algo>
  void all_reduce_impl(const T* in, T* out, std::size_t n, std::size_t out_n, Op, Algo) {
    detail::check_op<Op, T>();
    if constexpr (std::same_as<Algo, AutoReduce>) {
      const auto a = choose(n * sizeof(T));  // the same rules as auto_choice, without building its reason
      if (a == Ring::name) return all_reduce_impl(in, out, n, out_n, Op{}, Ring{});
      if (a == Direct::name) return all_reduce_impl(in, out, n, out_n, Op{}, Direct{});
      return all_reduce_impl(in, out, n, out_n, Op{}, Native{});
    } else {
      const detail::CallDesc d{.kind = detail::CallKind::all_reduce, .op = Op::kind, .dtype = dtype_name<T>(),
                               .in_count = n, .out_count = out_n, .has_op = true, .algorithm = Algo::name};
      if constexpr (std::same_as<Algo, Direct>) {
        // One message per peer carries the header and the data; every rank
        // reduces all inputs in rank order: bitwise identical everywhere.
        const auto seq = enter(d, in, n * sizeof(T));
        const void* const* raw = take_payloads(in, n * sizeof(T));
        const T* few[16] = {};
        std::vector<const T*> many(size_ > 16 ? static_cast<std::size_t>(size_) : 0);
        const T** ins = size_ > 16 ? many.data() : few;
        for (int r = 0; r < size_; ++r) ins[r] = static_cast<const T*>(raw[r]);
        T* outs[1] = {out};
        detail::reduce_range<Op>(ins, static_cast<std::size_t>(size_), outs, 1, 0, n, static_cast<std::size_t>(size_));
        done(seq);
      } else if constexpr (std::same_as<Algo, Native>) {
        const auto seq = enter(d, nullptr, 0);
        if (n) {
          const int count = detail::mpi::as_count(n, "all_reduce");
          detail::mpi::check(MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, count, detail::mpi::datatype<T>(),
                                           detail::mpi::op_of<Op>(), comm_),
                             "MPI_Allreduce");
          detail::finalize<Op>(out, n, static_cast<std::size_t>(size_));
        }
        done(seq);
      } else {
        const auto seq = enter(d, nullptr, 0);
        if (in != out && n) std::copy_n(in, n, out);
        run_ring<Op>(out, n);
        done(seq);
      }
    }
  }

  template <ReduceOperation Op, class T>
  void run_ring(T* data, std::size_t n);

  //! Starts collective `d`: checks this communicator is usable, exchanges the
  //! header with every other rank, and raises CollectiveMismatch on every
  //! rank if they disagree. `bytes` of `payload` (the direct algorithm's
  //! data) travel in the header's message when both fit in fused_max bytes,
  //! else as a second message that take_payloads() receives once the
  //! headers agree, so that no rank receives data of a size it did not expect.
  std::uint64_t enter(const detail::CallDesc& d, const void* payload, std::size_t bytes) {
    using detail::mpi::WireCall;
    if (!poisoned_.empty())
      throw CollectiveAborted("strata: " + d.str() + " on rank " + std::to_string(rank_) +
                              ": this communicator is unusable: " + poisoned_ +
                              " (create a new one to continue)");
    const std::uint64_t seq = ++entered_;
    cur_ = d;
    cur_seq_ = seq;
    deadline_ = std::chrono::steady_clock::now() + opts_.timeout;
    const auto me = static_cast<std::size_t>(rank_);
    calls_[me] = detail::mpi::to_wire(seq, d);
    fused_ = sizeof(WireCall) + bytes <= fused_max;
    calls_[me].separate = (bytes && !fused_) ? 1 : 0;  // a separate payload message follows
    if (size_ == 1) {
      if (auto why = detail::mpi::contract_violation(calls_, rank_); !why.empty()) throw CollectiveMismatch(why);
      return seq;
    }
    detail::mpi::Pending& recvs = header_recvs_;  // reused: no allocation per call
    detail::mpi::Pending& sends = header_sends_;
    const detail::mpi::Pending::OnThrow cancel_recvs{recvs}, cancel_sends{sends};
    recvs.reqs.assign(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    sends.reqs.clear();
    for (int r = 0; r < size_; ++r)
      if (r != rank_) {
        auto& box = inbox_[static_cast<std::size_t>(r)];
        if (box.size() < fused_max) box.resize(fused_max);
        detail::mpi::check(MPI_Irecv(box.data(), static_cast<int>(fused_max), MPI_BYTE, r, detail::mpi::tag_call,
                                     comm_, &recvs.reqs[static_cast<std::size_t>(r)]),
                           "MPI_Irecv");
      }
    outbox_.resize(sizeof(WireCall) + (fused_ ? bytes : 0));
    std::memcpy(outbox_.data(), &calls_[me], sizeof(WireCall));
    if (fused_ && bytes) std::memcpy(outbox_.data() + sizeof(WireCall), payload, bytes);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) {
        sends.reqs.push_back(MPI_REQUEST_NULL);
        detail::mpi::check(MPI_Isend(outbox_.data(), static_cast<int>(outbox_.size()), MPI_BYTE, r,
                                     detail::mpi::tag_call, comm_, &sends.reqs.back()),
                           "MPI_Isend");
        if (!fused_)
          each_block(bytes, [&](std::size_t off, std::size_t len) {
            payload_sends_.reqs.push_back(MPI_REQUEST_NULL);
            detail::mpi::check(MPI_Isend(static_cast<const std::byte*>(payload) + off,
                                         detail::mpi::as_count(len, "all_reduce"), MPI_BYTE, r, detail::mpi::tag_data,
                                         comm_, &payload_sends_.reqs.back()),
                               "MPI_Isend");
          });
      }
    got_.assign(static_cast<std::size_t>(size_), 0);
    got_[me] = 1;
    int missing = size_ - 1;
    wait_until([&] {
      for (int r = 0; r < size_ && missing; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        if (got_[ur]) continue;
        int flag = 0;
        MPI_Status st;
        MPI_Test(&recvs.reqs[ur], &flag, &st);
        if (!flag) continue;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (static_cast<std::size_t>(count) < sizeof(WireCall))
          throw CollectiveError("strata: rank " + std::to_string(r) + " sent a malformed collective header (" +
                                std::to_string(count) + " bytes)");
        std::memcpy(&calls_[ur], inbox_[ur].data(), sizeof(WireCall));
        last_seen_[ur] = calls_[ur].seq;
        got_[ur] = 1;
        --missing;
      }
      if (missing) return false;
      int all = 0;
      MPI_Testall(static_cast<int>(sends.reqs.size()), sends.reqs.data(), &all, MPI_STATUSES_IGNORE);
      return all != 0;
    }, [&] {
      std::string who, report;
      for (int r = 0; r < size_; ++r)
        if (!got_[static_cast<std::size_t>(r)]) {
          if (!who.empty()) who += ", ";
          who += std::to_string(r);
          const auto last = last_seen_[static_cast<std::size_t>(r)];
          // appended piece by piece: GCC 12 -O3 warns falsely (-Wrestrict) on "#" + string
          report += "\n  rank ";
          report += std::to_string(r);
          report += ": last completed collective ";
          if (last) {
            report += '#';
            report += std::to_string(last);
          } else {
            report += "none";
          }
        }
      if (who.empty()) return std::string("every rank arrived, but the headers this rank sent were not received");
      return "rank(s) " + who + " never arrived" + report;
    });
    if (!agree()) {
      if (auto why = detail::mpi::contract_violation(calls_, rank_); !why.empty()) {
        drain_payloads();
        throw CollectiveMismatch(why);
      }
    }
    return seq;
  }

  //! Every rank's all-reduce or barrier equals ours and is valid (the common
  //! case, checked without allocating); anything else takes the full check.
  [[nodiscard]] bool agree() const noexcept {
    const auto& a = calls_[static_cast<std::size_t>(rank_)];
    if (a.kind != static_cast<std::uint8_t>(detail::CallKind::all_reduce) &&
        a.kind != static_cast<std::uint8_t>(detail::CallKind::barrier))
      return false;
    if (a.in_count != a.out_count) return false;
    return std::all_of(calls_.begin(), calls_.end(), [&](const auto& b) { return detail::mpi::same_call(a, b); });
  }

  //! After a disagreement: take (and drop) the payloads other ranks sent
  //! separately and let ours be taken, so the communicator stays consistent.
  void drain_payloads() {
    // per rank: the bytes of payload it sent us separately, still to take
    std::vector<std::size_t> left(static_cast<std::size_t>(size_), 0);
    for (int r = 0; r < size_; ++r) {
      const auto& c = calls_[static_cast<std::size_t>(r)];
      if (r != rank_ && c.separate) left[static_cast<std::size_t>(r)] = c.in_count * detail::mpi::dtype_bytes(c.dtype);
    }
    std::vector<std::byte> sink;
    wait_until([&] {
      bool pending = false;
      for (int r = 0; r < size_; ++r) {
        auto& l = left[static_cast<std::size_t>(r)];
        while (l) {
          int flag = 0, count = 0;
          MPI_Message msg;
          MPI_Status st;
          MPI_Improbe(r, detail::mpi::tag_data, comm_, &flag, &msg, &st);
          if (!flag) break;
          MPI_Get_count(&st, MPI_BYTE, &count);
          sink.resize(static_cast<std::size_t>(count));
          MPI_Mrecv(sink.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
          l -= std::min(l, static_cast<std::size_t>(count));
        }
        pending = pending || l;
      }
      int all = 0;
      MPI_Testall(static_cast<int>(payload_sends_.reqs.size()), payload_sends_.reqs.data(), &all, MPI_STATUSES_IGNORE);
      return !pending && all;
    }, [&] { return std::string("ranks did not take the data of a collective they disagreed on"); });
    payload_sends_.reqs.clear();
  }

  //! The direct algorithm's inputs, indexed by rank (ours is `mine`): in the
  //! header messages, or received now as separate messages of `bytes`.
  const void* const* take_payloads(const void* mine, std::size_t bytes) {
    using detail::mpi::WireCall;
    ptrs_.assign(static_cast<std::size_t>(size_), nullptr);
    ptrs_[static_cast<std::size_t>(rank_)] = mine;
    if (size_ == 1) return ptrs_.data();
    if (fused_) {
      for (int r = 0; r < size_; ++r)
        if (r != rank_) ptrs_[static_cast<std::size_t>(r)] = inbox_[static_cast<std::size_t>(r)].data() + sizeof(WireCall);
      return ptrs_.data();
    }
    detail::mpi::Pending recvs;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) {
        auto& box = inbox_[static_cast<std::size_t>(r)];
        if (box.size() < bytes) box.resize(bytes);
        ptrs_[static_cast<std::size_t>(r)] = box.data();
        each_block(bytes, [&](std::size_t off, std::size_t len) {
          recvs.reqs.push_back(MPI_REQUEST_NULL);
          detail::mpi::check(MPI_Irecv(box.data() + off, static_cast<int>(len), MPI_BYTE, r, detail::mpi::tag_data,
                                       comm_, &recvs.reqs.back()),
                             "MPI_Irecv");
        });
      }
    wait_until([&] {
      int a = 0, b = 0;
      MPI_Testall(static_cast<int>(recvs.reqs.size()), recvs.reqs.data(), &a, MPI_STATUSES_IGNORE);
      MPI_Testall(static_cast<int>(payload_sends_.reqs.size()), payload_sends_.reqs.data(), &b, MPI_STATUSES_IGNORE);
      return a && b;
    }, [&] { return std::string("the direct exchange's data did not arrive"); });
    payload_sends_.reqs.clear();
    return ptrs_.data();
  }

  void done(std::uint64_t seq) noexcept { completed_ = seq; }

  //! Polls `ready()` until it returns true. Meanwhile: a notice that another
  //! rank aborted raises CollectiveAborted with its reason; the interrupt
  //! flag raises CollectiveAborted; the deadline raises CollectiveTimeout
  //! with `missing()`. Either way the communicator is then unusable.
  template <class Ready, class Missing>
  void wait_until(Ready ready, Missing missing) {
    for (int i = 0;; ++i) {
      if (ready()) return;
      if ((i & 15) == 15) {  // fast collectives never pay for these checks
        check_abort_notice();
        if (interrupt_ && interrupt_->load(std::memory_order_relaxed)) {
          poison("abandoned because a replica of rank " + std::to_string(rank_) + " failed");
          throw CollectiveAborted("strata: collective #" + std::to_string(cur_seq_) + " " + cur_.str() + " on rank " +
                                  std::to_string(rank_) + " abandoned: a local replica failed");
        }
        if (std::chrono::steady_clock::now() > deadline_) {
          const std::string msg = "strata: collective #" + std::to_string(cur_seq_) + " " + cur_.str() + " on rank " +
                                  std::to_string(rank_) + " of " + std::to_string(size_) + " timed out after " +
                                  std::to_string(opts_.timeout.count()) + " ms: " + missing();
          poison("collective #" + std::to_string(cur_seq_) + " timed out");
          throw CollectiveTimeout(msg);
        }
      }
      relax(i);
    }
  }

  void check_abort_notice() {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, detail::mpi::tag_abort, comm_, &flag, &st);
    if (!flag) return;
    int count = 0;
    MPI_Get_count(&st, MPI_CHAR, &count);
    std::string why(static_cast<std::size_t>(count), '\0');
    MPI_Recv(why.data(), count, MPI_CHAR, st.MPI_SOURCE, detail::mpi::tag_abort, comm_, MPI_STATUS_IGNORE);
    remote_abort_ = true;
    poison("rank " + std::to_string(st.MPI_SOURCE) + " failed: " + why);
    throw CollectiveAborted("strata: collective #" + std::to_string(cur_seq_) + " " + cur_.str() + " on rank " +
                            std::to_string(rank_) + " abandoned: rank " + std::to_string(st.MPI_SOURCE) +
                            " failed: " + why);
  }

  void poison(std::string why) {
    if (poisoned_.empty()) poisoned_ = std::move(why);
    detail::mpi::runtime().note_failure(opts_.timeout);
  }

  detail::mpi::CommHandle comm_;
  int rank_ = 0, size_ = 1;
  MpiOptions opts_;
  bool network_ = false;
  int node_size_ = 1;
  std::string network_why_;
  std::string_view forced_;  // the algorithm forced by the options or the environment, if any
  std::string force_source_, force_error_;
  std::uint64_t entered_ = 0, completed_ = 0;
  std::vector<std::uint64_t> last_seen_;           // per rank: the last collective it arrived at with us
  std::vector<std::vector<std::byte>> inbox_;      // per rank: its header (+ payload) of this collective
  std::vector<detail::mpi::WireCall> calls_;       // per rank: its call of this collective
  std::vector<std::byte> outbox_, staging_;
  static constexpr std::size_t fused_max = 4096;  // header + payload in one message up to here (under eager limits)
  bool fused_ = true;
  detail::mpi::Pending payload_sends_;   // the direct algorithm's separate payload messages
  detail::mpi::Pending header_recvs_, header_sends_;
  std::vector<char> got_;                // per rank: its header arrived
  std::vector<const void*> ptrs_;        // per rank: its direct payload
  std::string poisoned_;
  bool remote_abort_ = false, abort_sent_ = false;
  const std::atomic<bool>* interrupt_ = nullptr;
  detail::CallDesc cur_;
  std::uint64_t cur_seq_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

namespace detail::mpi {

//! The ring link over MPI: a step sends our chunk to the right neighbour and
//! receives the left one's into staging, in `pipeline` messages so that the
//! reduction of one overlaps the arrival of the next.
template <class T>
class MpiRingLink {
 public:
  MpiRingLink(MpiCommunicator& c, T* data) : c_(c), data_(data) {}
  [[nodiscard]] int rank() const noexcept { return c_.rank_; }
  [[nodiscard]] int size() const noexcept { return c_.size_; }

  template <class Fn>
  void step(std::size_t k, Range send, Range recv, Fn fn) {
    const int p = c_.size_, me = c_.rank_;
    const int left = (me + p - 1) % p, right = (me + 1) % p;
    // The left neighbour splits its send range exactly as we split our receive range.
    const std::size_t n = recv.size(), rblocks = blocks_for(n), sblocks = blocks_for(send.size());
    if (c_.staging_.size() < n * sizeof(T)) c_.staging_.resize(n * sizeof(T));
    T* stage = reinterpret_cast<T*>(c_.staging_.data());
    Pending recvs, sends;
    recvs.reqs.assign(rblocks, MPI_REQUEST_NULL);
    sends.reqs.assign(sblocks, MPI_REQUEST_NULL);
    for (std::size_t b = 0; b < rblocks; ++b) {
      const Range rb = shard_range(n, rblocks, b);
      check(MPI_Irecv(stage + rb.begin, static_cast<int>(rb.size()), datatype<T>(), left, tag_ring, c_.comm_,
                      &recvs.reqs[b]),
            "MPI_Irecv");
    }
    for (std::size_t b = 0; b < sblocks; ++b) {
      const Range sb = shard_range(send.size(), sblocks, b);
      check(MPI_Isend(data_ + send.begin + sb.begin, static_cast<int>(sb.size()), datatype<T>(), right, tag_ring,
                      c_.comm_, &sends.reqs[b]),
            "MPI_Isend");
    }
    std::size_t next = 0;
    c_.wait_until([&] {
      while (next < rblocks) {
        int flag = 0;
        MPI_Test(&recvs.reqs[next], &flag, MPI_STATUS_IGNORE);
        if (!flag) return false;
        const Range rb = shard_range(n, rblocks, next);
        fn(data_ + recv.begin + rb.begin, stage + rb.begin, rb.size());
        ++next;
      }
      int all = 0;
      MPI_Testall(static_cast<int>(sblocks), sends.reqs.data(), &all, MPI_STATUSES_IGNORE);
      return all != 0;
    }, [&] {
      return "ring step " + std::to_string(k) + ": " +
             (next < rblocks ? "rank " + std::to_string(left) + " (left neighbour) did not deliver its chunk"
                            : "rank " + std::to_string(right) + " (right neighbour) did not take our chunk");
    });
  }

 private:
  //! Messages per step: enough to overlap, none smaller than 64 KiB; none for an empty chunk.
  [[nodiscard]] std::size_t blocks_for(std::size_t elems) const noexcept {
    if (elems == 0) return 0;
    return std::clamp<std::size_t>(elems * sizeof(T) / (std::size_t{64} << 10), 1,
                                   static_cast<std::size_t>(std::max(1, c_.opts_.ring_pipeline)));
  }

  MpiCommunicator& c_;
  T* data_;
};

}  // namespace detail::mpi

template <ReduceOperation Op, class T>
void MpiCommunicator::run_ring(T* data, std::size_t n) {
  detail::mpi::MpiRingLink<T> link(*this, data);
  detail::ring_all_reduce<Op>(link, data, n, std::max<std::size_t>(1, opts_.ring_chunk_bytes / sizeof(T)));
}

}  // namespace strata
