#pragma once
//! The in-process communicator: what one CPU replica (thread) uses to take
//! part in collectives with the other replicas of its team. Buffers are any
//! contiguous range of float, double, int32 or int64 (std::span,
//! std::vector, strata::Tensor); calls are blocking and every replica must
//! make the same calls in the same order (checked: see CollectiveMismatch).
//!   comm.all_reduce(grad, strata::Mean);            // in place, automatic algorithm
//!   comm.all_reduce(in, out, strata::Sum, strata::Ring{});
//! It also moves tagged point-to-point messages (send / recv), and models
//! strata::AsyncCommunicator (comm/communicator.hpp): the collectives have
//! non-blocking forms returning a strata::Work, run in issue order by the
//! replica's progress thread. Buffers of strata::bf16 or fp16 reduce with
//! Sum in FP32, rounded to 16 bits once per element (direct) or per step (ring).
//!   strata::Work w = comm.all_reduce_async(bucket, strata::Sum);  ...;  w.wait();

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/comm/algorithm/direct.hpp>
#include <strata/comm/algorithm/ring.hpp>
#include <strata/comm/collective_forms.hpp>
#include <strata/comm/communicator.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/ring_link.hpp>
#include <strata/comm/threads/team.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/concepts.hpp>
#include <strata/core/trace.hpp>

namespace strata {

//! An algorithm a caller may name for one all-reduce.
template <class A>
concept AllReduceAlgorithm = std::same_as<A, Ring> || std::same_as<A, Direct> || std::same_as<A, AutoReduce>;

//! One replica's handle on its team's collectives. A small handle (team and
//! rank): copies share the replica's order of operations.
class ThreadCommunicator : public detail::CollectiveForms<ThreadCommunicator> {
 public:
  //! The collectives (barrier, all_reduce, broadcast, reduce_scatter,
  //! all_gather, and their *_async forms: comm/collective_forms.hpp), each
  //! bitwise identical on every replica. A non-blocking form queues the
  //! collective behind this replica's earlier operations; its progress thread
  //! runs it with the very code (and so the very bits) of the blocking form.
  //! Blocking calls made meanwhile (point-to-point included) run after the
  //! queued ones, in issue order.
  //!   comm.all_reduce(grad, strata::Mean);
  //!   strata::Work w = comm.all_reduce_async(bucket, strata::Sum);  ...;  w.wait();
  template <class A>
  static constexpr bool takes_algorithm = AllReduceAlgorithm<A>;

  ThreadCommunicator(detail::Team& team, int rank) : team_(&team), rank_(rank) {}

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return team_->size(); }

  //! Reduces `in` over the replicas into `root`'s `out` only (the central
  //! copy); every replica reduces a slice, so the work is shared. `out` is
  //! ignored on the other replicas and may be empty there.
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<detail::buffer_element_t<In>, detail::buffer_element_t<Out>>
  void reduce_to_one(In&& in, Out&& out, int root, Op) {
    using T = detail::buffer_element_t<Out>;
    detail::check_op<Op, T>();
    const T* i = std::ranges::data(in);
    T* o = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in), on = std::ranges::size(out);
    ordered("reduce_to_one", [&] { reduce_to_one_now<Op>(i, n, o, on, root); }, what<T>("reduce_to_one", n));
  }

  //! Sends `data` to replica `peer` with `tag` (>= 0). Returns without
  //! waiting for the receiver: the data is copied, into the receiver's memory
  //! if it already waits in the matching recv, else into a recycled buffer,
  //! so `data` may be reused at once. Unreceived messages queue without a
  //! bound (a sender far ahead of its receiver holds that many copies);
  //! their buffers are recycled, so steady traffic allocates nothing.
  //!   comm.send(activations, comm.rank() + 1, /*tag=*/0);
  //! Messages from one replica to another with one tag arrive in send order.
  template <Buffer B>
  void send(B&& data, int peer, int tag) {
    using T = detail::buffer_element_t<B>;
    check_peer("send", peer, tag);
    const std::size_t n = std::ranges::size(data);
    const detail::P2pBuffer b{.dtype = dtype_name<T>(), .count = n, .bytes = n * sizeof(T),
                              .in = std::ranges::data(data), .out = nullptr};
    ordered(
        "send",
        [&] {
          trace::Span span{"send", trace::Category::Collective, {{"bytes", b.bytes}, {"to", peer}, {"tag", tag}}};
          team_->send(rank_, peer, tag, b);
          count(b.bytes);
        },
        what<T>("send", n));
  }

  //! Receives into `data` the next message that replica `peer` sent to this
  //! replica with `tag`. Its element type and count must equal `data`'s
  //! (else CollectiveMismatch naming both); no matching send within
  //! CommOptions::timeout raises CollectiveTimeout naming the peer and tag,
  //! a failed replica releases it with CollectiveAborted.
  //!   comm.recv(activations, comm.rank() - 1, /*tag=*/0);
  template <MutableBuffer B>
  void recv(B&& data, int peer, int tag) {
    using T = detail::buffer_element_t<B>;
    check_peer("recv", peer, tag);
    const std::size_t n = std::ranges::size(data);
    const detail::P2pBuffer b{.dtype = dtype_name<T>(), .count = n, .bytes = n * sizeof(T), .in = nullptr,
                              .out = std::ranges::data(data)};
    ordered(
        "recv",
        [&] {
          trace::Span span{"recv", trace::Category::Collective, {{"bytes", b.bytes}, {"from", peer}, {"tag", tag}}};
          team_->recv(rank_, peer, tag, b);
        },
        what<T>("recv", n));
  }

  //! Bytes of element data this replica has handed to its collectives and
  //! sends since the team was made: each one's input, elements x element
  //! size (the gradient an all-reduce carries; halved when it travels as bf16
  //! or fp16; a message once sent). Read it between collectives (its queued
  //! ones count once they ran).
  //!   const auto before = comm.payload_bytes();  comm.all_reduce(g, strata::Sum);  // + g.size() * 4
  [[nodiscard]] std::uint64_t payload_bytes() noexcept {
    return team_->slot(rank_).payload.load(std::memory_order_relaxed);
  }

  //! The algorithm AutoReduce picks for `bytes` per replica.
  [[nodiscard]] std::string_view auto_choice(std::size_t bytes) const noexcept {
    const std::size_t t = team_->options().auto_ring_min_bytes;
    return (t != 0 && bytes >= t && size() > 1) ? Ring::name : Direct::name;
  }

 private:
  //! Runs `op` now, or after this replica's queued operations (then waited for).
  template <class Op, class What>
  void ordered(const char*, Op&& op, What desc) {
    team_->progress(rank_).run(std::forward<Op>(op), desc);
  }
  //! Describes an operation for its Work's messages, only when needed.
  template <class T>
  static auto what(const char* call, std::size_t n) {
    return [call, n] { return detail::describe_call<T>(call, n); };
  }
  friend class detail::CollectiveForms<ThreadCommunicator>;
  //! Queues body(a copy of this handle) behind this replica's operations.
  template <class What, class Body>
  Work submit_with(const char*, What desc, Body body) {
    return team_->progress(rank_).submit(
        desc, std::function<void()>([c = *this, body = std::move(body)]() mutable { body(c); }));
  }

  void check_peer(const char* call, int peer, int tag) const {
    if (peer == rank_ || peer < 0 || peer >= size())
      throw Error("strata: " + std::string(call) + " on replica " + std::to_string(rank_) + ": peer " +
                  std::to_string(peer) + (peer == rank_ ? " is this replica itself" : " is not a replica") +
                  "; name another replica of the team, 0 .. " + std::to_string(size() - 1));
    if (tag < 0)
      throw Error("strata: " + std::string(call) + " on replica " + std::to_string(rank_) + " with peer " +
                  std::to_string(peer) + ": tag " + std::to_string(tag) + " is negative; tags are >= 0");
  }

  template <class T>
  std::vector<const T*> inputs(std::size_t offset) {
    std::vector<const T*> v(static_cast<std::size_t>(size()));
    for (int r = 0; r < size(); ++r) v[static_cast<std::size_t>(r)] = static_cast<const T*>(team_->slot(r).in) + offset;
    return v;
  }

  void count(std::size_t bytes) noexcept { team_->slot(rank_).payload.fetch_add(bytes, std::memory_order_relaxed); }

  // The collectives themselves, on whichever thread runs them (the caller's
  // or the replica's progress thread): one code path for both forms.
  void barrier_now() {
    trace::Span span{"barrier", trace::Category::Collective, {{"peers", size()}}};
    const detail::CallDesc d{};
    team_->leave(rank_, team_->enter(rank_, d, nullptr, nullptr), d);
  }

  template <class T>
  void broadcast_now(T* p, std::size_t n, int root) {
    trace::Span span{"broadcast", trace::Category::Collective, {{"bytes", n * sizeof(T)}, {"root", root}, {"peers", size()}}};
    count(n * sizeof(T));
    const detail::CallDesc d{.kind = detail::CallKind::broadcast, .dtype = dtype_name<T>(), .in_count = n,
                             .out_count = n, .root = root, .has_op = false, .algorithm = {}};
    const auto seq = team_->enter(rank_, d, p, p);
    if (rank_ != root && n) std::copy_n(static_cast<const T*>(team_->slot(root).in), n, p);
    team_->leave(rank_, seq, d);
  }

  template <ReduceOperation Op, class T>
  void reduce_scatter_now(const T* in, std::size_t n, T* o, std::size_t out_n) {
    trace::Span span{"reduce_scatter", trace::Category::Collective, {{"bytes", n * sizeof(T)}, {"peers", size()}}};
    count(n * sizeof(T));
    const detail::CallDesc d{.kind = detail::CallKind::reduce_scatter, .op = Op::kind, .dtype = dtype_name<T>(),
                             .in_count = n, .out_count = out_n, .root = 0, .has_op = true, .algorithm = {}};
    const auto seq = team_->enter(rank_, d, in, o);
    const Range mine = shard_range(n, static_cast<std::size_t>(size()), static_cast<std::size_t>(rank_));
    std::vector<const T*> ins = inputs<T>(mine.begin);
    detail::reduce_range<Op>(ins.data(), ins.size(), &o, 1, 0, mine.size(), ins.size());
    team_->leave(rank_, seq, d);
  }

  template <class T>
  void all_gather_now(const T* in, std::size_t n, T* o, std::size_t out_n) {
    trace::Span span{"all_gather", trace::Category::Collective, {{"bytes", out_n * sizeof(T)}, {"peers", size()}}};
    count(n * sizeof(T));
    const detail::CallDesc d{.kind = detail::CallKind::all_gather, .dtype = dtype_name<T>(), .in_count = n,
                             .out_count = out_n, .root = 0, .has_op = false, .algorithm = {}};
    const auto seq = team_->enter(rank_, d, in, o);
    for (int r = 0; r < size(); ++r) {
      const detail::Slot& s = team_->slot(r);
      std::copy_n(static_cast<const T*>(s.in), s.desc.in_count, o);
      o += s.desc.in_count;
    }
    team_->leave(rank_, seq, d);
  }

  template <ReduceOperation Op, class T>
  void reduce_to_one_now(const T* in, std::size_t n, T* out, std::size_t out_n, int root) {
    trace::Span span{"reduce_to_one", trace::Category::Collective,
                     {{"bytes", n * sizeof(T)}, {"root", root}, {"peers", size()}}};
    count(n * sizeof(T));
    const detail::CallDesc d{.kind = detail::CallKind::reduce_to_one, .op = Op::kind, .dtype = dtype_name<T>(),
                             .in_count = n, .out_count = out_n, .root = root, .has_op = true, .algorithm = {}};
    const auto seq = team_->enter(rank_, d, in, out);
    const Range mine = detail::aligned_range(n, static_cast<std::size_t>(size()), static_cast<std::size_t>(rank_),
                                             64 / sizeof(T));
    std::vector<const T*> ins = inputs<T>(0);
    T* o = static_cast<T*>(team_->slot(root).out);
    detail::reduce_range<Op>(ins.data(), ins.size(), &o, 1, mine.begin, mine.end, ins.size());
    team_->leave(rank_, seq, d);
  }

  template <ReduceOperation Op, class T, class Algo>
  void all_reduce_now(const T* in, T* out, std::size_t n, std::size_t out_n, [[maybe_unused]] Op op, Algo) {
    if constexpr (std::same_as<Algo, AutoReduce>) {
      if (auto_choice(n * sizeof(T)) == Ring::name)
        return all_reduce_now(in, out, n, out_n, op, Ring{});
      return all_reduce_now(in, out, n, out_n, op, Direct{});
    } else {
      trace::Span span{"all_reduce", trace::Category::Collective,
                       {{"bytes", n * sizeof(T)}, {"algorithm", Algo::name.data()}, {"peers", size()}}};
      count(n * sizeof(T));
      const detail::CallDesc d{.kind = detail::CallKind::all_reduce, .op = Op::kind, .dtype = dtype_name<T>(),
                               .in_count = n, .out_count = out_n, .root = 0, .has_op = true, .algorithm = Algo::name};
      if constexpr (std::same_as<Algo, Ring>) {
        // The ring works in place on `out`; neighbours read it from the first
        // step, so it must hold our input before we announce ourselves.
        if (in != out && out_n == n && n) std::copy_n(in, n, out);
        const auto seq = team_->enter(rank_, d, out, out);
        detail::ThreadRingLink<T> link(*team_, rank_, seq, d, out);
        detail::ring_all_reduce<Op>(link, out, n, team_->options().ring_chunk_bytes / sizeof(T));
        team_->leave(rank_, seq, d);
      } else {
        const auto seq = team_->enter(rank_, d, in, out);
        const std::size_t p = static_cast<std::size_t>(size());
        const Range mine = detail::aligned_range(n, p, static_cast<std::size_t>(rank_), 64 / sizeof(T));
        std::vector<const T*> ins = inputs<T>(0);
        std::vector<T*> outs(p);
        for (std::size_t r = 0; r < p; ++r) outs[r] = static_cast<T*>(team_->slot(static_cast<int>(r)).out);
        detail::reduce_range<Op>(ins.data(), p, outs.data(), p, mine.begin, mine.end, p);
        team_->leave(rank_, seq, d);
      }
    }
  }

  detail::Team* team_;
  int rank_;
};

static_assert(AsyncCommunicator<ThreadCommunicator>, "ThreadCommunicator must model strata::AsyncCommunicator");

}  // namespace strata
