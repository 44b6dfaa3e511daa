#pragma once
//! The all-reduce algorithms over MPI, each under the collective contract:
//! the ring (written once in comm/algorithm/ring.hpp, here over MpiRingLink),
//! direct (every rank's data to every rank in the contract's own exchange,
//! reduced in rank order), native (MPI_Iallreduce after the contract, waited for
//! under the deadline), and
//! the automatic choice between them (AutoSelector).
//!   detail::mpi::all_reduce_with<Sum>(exchange, in, out, n, n, Ring{});
//! Ring and direct reduce in a fixed order: bitwise the same on every rank
//! and every run. Native reduces in MPI's order (deterministic for a given
//! MPI library, rank count and size).

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <strata/comm/algorithm/direct.hpp>
#include <strata/comm/algorithm/native.hpp>
#include <strata/comm/algorithm/ring.hpp>
#include <strata/comm/mpi/algorithm_choice.hpp>
#include <strata/comm/mpi/exchange.hpp>
#include <strata/comm/reduce_op.hpp>

namespace strata {

//! An algorithm a caller may name for one MPI all-reduce.
//!   comm.all_reduce(grad, strata::Sum, strata::Ring{});
template <class A>
concept MpiAllReduceAlgorithm = std::same_as<A, Ring> || std::same_as<A, Direct> || std::same_as<A, Native> ||
                                std::same_as<A, AutoReduce>;

//! What AutoReduce picks for a message size, and why (a sentence).
//!   std::puts(comm.auto_choice(16 << 20).reason.c_str());
struct AutoChoice {
  std::string_view algorithm;
  std::string reason;
};

namespace detail::mpi {

//! The sum of 16-bit elements as an MPI operation: each pair added in FP32, rounded once.
template <Half16 T>
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = a[i] + b[i];
}

template <ReduceOperation Op, class T = float>
MPI_Op op_of() {
  if constexpr (Half16<T>) {  // Sum only (check_op); created once, at the first use (MPI is up, under its lock)
    static const MPI_Op op = [] {
      MPI_Op o = MPI_OP_NULL;
      check(MPI_Op_create(&half_sum<T>, /*commute=*/1, &o), "MPI_Op_create");
      return o;
    }();
    return op;
  } else if constexpr (Op::kind == OpKind::min) return MPI_MIN;
  else if constexpr (Op::kind == OpKind::max) return MPI_MAX;
  else if constexpr (Op::kind == OpKind::product) return MPI_PROD;
  else return MPI_SUM;  // sum, and mean before its division
}

//! The ring link over MPI: a step sends our chunk to the right neighbour and
//! receives the left one's into staging (all-gather steps: in place), in
//! `pipeline` messages so that the reduction of one overlaps the arrival of the next.
template <class T>
class MpiRingLink {
 public:
  MpiRingLink(Exchange& ex, T* data) : ex_(ex), data_(data) {}
  [[nodiscard]] int rank() const noexcept { return ex_.rank(); }
  [[nodiscard]] int size() const noexcept { return ex_.size(); }

  template <class Fn>
  void step(std::size_t k, Range send, Range recv, Fn fn) {
    const int p = ex_.size(), me = ex_.rank();
    const int left = (me + p - 1) % p, right = (me + 1) % p;
    // The left neighbour splits its send range exactly as we split our receive range.
    const std::size_t n = recv.size(), rblocks = blocks_for(n), sblocks = blocks_for(send.size());
    // An all-gather step only copies the left neighbour's chunk: it lands in
    // place (that range is not sent in this step), saving a copy through staging.
    bool in_place = false;
    if constexpr (std::is_pointer_v<Fn>) in_place = fn == &ring_copy_fn<T>;
    T* stage = data_ + recv.begin;
    if (!in_place) {
      auto& staging = ex_.staging();
      if (staging.size() < n * sizeof(T)) staging.resize(n * sizeof(T));
      stage = reinterpret_cast<T*>(staging.data());
    }
    Pending recvs, sends;
    recvs.reqs.assign(rblocks, MPI_REQUEST_NULL);
    sends.reqs.assign(sblocks, MPI_REQUEST_NULL);
    for (std::size_t b = 0; b < rblocks; ++b) {
      const Range rb = shard_range(n, rblocks, b);
      check(MPI_Irecv(stage + rb.begin, static_cast<int>(rb.size()), datatype<T>(), left, tag_ring, ex_.comm(),
                      &recvs.reqs[b]),
            "MPI_Irecv");
    }
    for (std::size_t b = 0; b < sblocks; ++b) {
      const Range sb = shard_range(send.size(), sblocks, b);
      check(MPI_Isend(data_ + send.begin + sb.begin, static_cast<int>(sb.size()), datatype<T>(), right, tag_ring,
                      ex_.comm(), &sends.reqs[b]),
            "MPI_Isend");
    }
    std::size_t next = 0;
    ex_.wait_until([&] {
      while (next < rblocks) {
        int flag = 0;
        MPI_Test(&recvs.reqs[next], &flag, MPI_STATUS_IGNORE);
        if (!flag) return false;
        const Range rb = shard_range(n, rblocks, next);
        if (!in_place) fn(data_ + recv.begin + rb.begin, stage + rb.begin, rb.size());
        ++next;
      }
      return sends.test_all();
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
                                   static_cast<std::size_t>(std::max(1, ex_.options().ring_pipeline)));
  }

  Exchange& ex_;
  T* data_;
};

//! One all-reduce of `n` elements from `in` into `out` (`out_n` elements;
//! the contract rejects out_n != n on every rank) with the named algorithm.
template <ReduceOperation Op, class T, class Algo>
void all_reduce_with(Exchange& ex, const T* in, T* out, std::size_t n, std::size_t out_n, Algo) {
  const int p = ex.size();
  const CallDesc d{.kind = CallKind::all_reduce, .op = Op::kind, .dtype = dtype_name<T>(), .in_count = n,
                   .out_count = out_n, .has_op = true, .algorithm = Algo::name};
  if constexpr (std::same_as<Algo, Direct>) {
    // One message per peer carries the header and the data; every rank
    // reduces all inputs in rank order: bitwise identical everywhere.
    const auto seq = ex.enter(d, in, n * sizeof(T));
    const void* const* raw = ex.take_payloads(in, n * sizeof(T));
    const T* few[16] = {};
    std::vector<const T*> many(p > 16 ? static_cast<std::size_t>(p) : 0);
    const T** ins = p > 16 ? many.data() : few;
    for (int r = 0; r < p; ++r) ins[r] = static_cast<const T*>(raw[r]);
    T* outs[1] = {out};
    reduce_range<Op>(ins, static_cast<std::size_t>(p), outs, 1, 0, n, static_cast<std::size_t>(p));
    ex.done(seq);
  } else if constexpr (std::same_as<Algo, Native>) {
    const auto seq = ex.enter(d, nullptr, 0);
    if (n) {
      const int count = as_count(n, "all_reduce");
      MPI_Request req = MPI_REQUEST_NULL;  // non-blocking, so a rank stopped after the contract times out
      check(MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, count, datatype<T>(), op_of<Op, T>(), ex.comm(), &req),
            "MPI_Iallreduce");
      ex.wait_collective(req, "MPI_Iallreduce");
      finalize<Op>(out, n, static_cast<std::size_t>(p));
    }
    ex.done(seq);
  } else {
    static_assert(std::same_as<Algo, Ring>);
    const auto seq = ex.enter(d, nullptr, 0);
    if (in != out && n) std::copy_n(in, n, out);
    MpiRingLink<T> link(ex, out);
    ring_all_reduce<Op>(link, out, n, std::max<std::size_t>(1, ex.options().ring_chunk_bytes / sizeof(T)));
    ex.done(seq);
  }
}

//! AutoReduce's decision for a communicator. In order:
//! - a forced algorithm (MpiOptions::force_algorithm, else the environment
//!   variable STRATA_MPI_ALLREDUCE);
//! - one rank, or data that travels in the contract's own message (up to
//!   4056 bytes; without auto_tune, up to direct_max_bytes_shm/net): direct,
//!   since one exchange then carries the contract and the data, fewer
//!   messages than any other algorithm needs;
//! - with MpiOptions::auto_tune (the default), a measurement: the first calls
//!   of each size class (powers of two) run native, ring and (up to 1 MiB,
//!   or at any size between two ranks over a network) direct interleaved, round after round (native, ring, direct, native,
//!   ...), `tune_rounds` rounds (more below 256 KiB, up to 32, where a trial
//!   is cheap and noisy). After the last trial every rank's times are agreed
//!   (one small extra collective, MIN over ranks trial by trial: the rank that
//!   arrived last waited least for the others), and every rank applies the
//!   same pure rule to the same numbers (choose_from_trials,
//!   algorithm_choice.hpp): native unless an alternative is at least 15%
//!   faster in its median and in its best time and beat native in 2 of 3
//!   rounds (in doubt, MPI's own algorithm). The trials are real all-reduces;
//!   each waits under the deadline like any call;
//! - without it, rules by size and transport from MpiOptions.
//! Every rank makes the same calls in the same order (the contract checks
//! it), so every rank tries the same algorithms and then keeps the same one.
class AutoSelector {
 public:
  explicit AutoSelector(const Exchange& ex) {
    std::string forced = ex.options().force_algorithm;
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
  }

  //! The algorithm for `bytes` per rank, on the hot path (no strings built).
  [[nodiscard]] std::string_view choose(const Exchange& ex, std::size_t bytes) const {
    if (!force_error_.empty()) throw Error(force_error_);
    if (!forced_.empty()) return forced_;
    if (ex.size() == 1 || bytes <= direct_rule(ex)) return Direct::name;
    if (ex.options().auto_tune) {
      const Bucket& b = buckets_[bucket_of(bytes)];
      return b.chosen ? candidates[b.chosen - 1] : candidates[b.times.size() % candidates_for(ex, bytes)];
    }
    if (ring_min(ex) != 0 && bytes >= ring_min(ex)) return Ring::name;
    return Native::name;
  }

  //! Whether the next call of `bytes` is a measurement (then record() its time).
  [[nodiscard]] bool measuring(const Exchange& ex, std::size_t bytes) const noexcept {
    return forced_.empty() && force_error_.empty() && ex.options().auto_tune && ex.size() > 1 &&
           bytes > direct_rule(ex) && !buckets_[bucket_of(bytes)].chosen;
  }

  //! A measured call of `bytes` took `seconds` on this rank. After the last
  //! trial of its size class, agrees with every rank on the times (a
  //! collective: every rank gets here at the same call) and decides.
  void record(Exchange& ex, std::size_t bytes, double seconds) {
    Bucket& b = buckets_[bucket_of(bytes)];
    const std::size_t k = candidates_for(ex, bytes), total = k * rounds_for(ex, bytes);
    if (b.times.empty()) b.times.reserve(total);
    b.times.push_back(seconds);  // round times.size() / k, candidate times.size() % k
    if (b.times.size() < total) return;
    all_reduce_with<MinOp>(ex, b.times.data(), b.times.data(), total, total, Direct{});
    b.verdict = choose_from_trials(b.times, k);
    b.chosen = static_cast<std::uint8_t>(b.verdict.pick + 1);
    b.times = {};  // the verdict keeps what explain() reports
  }

  //! choose(), with the reason in a sentence.
  [[nodiscard]] AutoChoice explain(const Exchange& ex, std::size_t bytes) const {
    const std::string_view a = choose(ex, bytes);  // the decision; what follows only explains it
    if (!forced_.empty()) return {a, "forced by " + force_source_ + "=" + std::string(a)};
    if (ex.size() == 1) return {a, "one rank: nothing to exchange"};
    const std::string sz = std::to_string(bytes) + " B", net = ex.network() ? "net " : "shm ";
    const std::string where = ex.network() ? "over a network (" + ex.network_why() + ")" : "in shared memory";
    if (a == Direct::name && bytes <= direct_rule(ex))
      return {a, sz + " <= " + (ex.options().auto_tune ? "" : "direct_max_bytes_" + net) +
                     std::to_string(direct_rule(ex)) + ", ranks talk " + where +
                     ": one exchange carries the contract and the data"};
    if (ex.options().auto_tune) {
      const std::size_t i = bucket_of(bytes), k = candidates_for(ex, bytes);
      const Bucket& b = buckets_[i];
      const std::string cls = "(" + std::to_string(i ? (std::size_t{1} << (i - 1)) : 0) + ", " +
                              std::to_string(std::size_t{1} << i) + "] B";
      if (!b.chosen)
        return {a, sz + ", ranks talk " + where + ": size class " + cls + " not measured yet; its next call is trial " +
                       std::to_string(b.times.size() + 1) + " of " + std::to_string(k * rounds_for(ex, bytes)) +
                       " and runs " + std::string(a)};
      const TrialVerdict& v = b.verdict;
      std::string times;
      for (std::size_t c = 0; c < k; ++c) {
        if (c) times += ", ";
        times += std::string(candidates[c]) + " " + std::to_string(static_cast<long long>(v.median[c] * 1e6)) + " us";
        if (c) times += " (faster in " + std::to_string(v.wins[c]) + ")";
      }
      const std::string how = "median of " + std::to_string(v.rounds) + " interleaved rounds: " + times;
      return {a, sz + ", ranks talk " + where + ": measured on this communicator's first calls of size class " + cls +
                     " (" + how + "): " + std::string(a) +
                     (a == Native::name
                          ? " (no algorithm beat native, MPI's own all-reduce, by 15% in its median and best time and in " +
                                std::to_string(v.wins_needed) + " of " + std::to_string(v.rounds) + " rounds)"
                          : " is at least 15% faster than native in its median and best time and won " +
                                std::to_string(v.wins[v.pick]) + " of " + std::to_string(v.rounds) + " rounds")};
    }
    if (a == Ring::name)
      return {a, sz + " >= ring_min_bytes_" + net + std::to_string(ring_min(ex)) + ", ranks talk " + where +
                     ": the ring's pipelined steps beat MPI_Allreduce there"};
    return {a, sz + " between the direct and ring thresholds, ranks talk " + where + ": MPI_Allreduce"};
  }

 private:
  //! What a size class may try, native first (the default when none is faster).
  static constexpr std::string_view candidates[3] = {Native::name, Ring::name, Direct::name};
  //! Direct sends every rank's data to every rank: tried only up to 1 MiB.
  //! Direct up to 1 MiB, and at any size between two ranks over a network,
  //! where it moves what the ring moves in one step instead of two (on a
  //! shaped 1 Gbit/s link it took 227-265 ms for 22 MiB against 402-418 ms
  //! native and ring: docs/performance.md); above that its traffic grows
  //! with the ranks. The same on every rank (their transport agrees).
  static std::size_t candidates_for(const Exchange& ex, std::size_t bytes) noexcept {
    return bytes <= (std::size_t{1} << 20) || (ex.network() && ex.size() == 2) ? 3 : 2;
  }
  //! Trials of each algorithm: tune_rounds, more for small sizes (up to 32
  //! under 8 KiB), where one trial takes microseconds and one descheduled
  //! rank would decide alone. A function of the size: the same on every rank.
  static std::size_t rounds_for(const Exchange& ex, std::size_t bytes) noexcept {
    const auto r = static_cast<std::size_t>(std::max(1, ex.options().tune_rounds));
    return std::clamp<std::size_t>(r * ((std::size_t{256} << 10) / std::max<std::size_t>(bytes, 1)), r,
                                   std::max<std::size_t>(r, 32));
  }
  //! Size class: (2^(i-1), 2^i] bytes.
  static std::size_t bucket_of(std::size_t bytes) noexcept {
    return static_cast<std::size_t>(std::bit_width(bytes > 1 ? bytes - 1 : 0));
  }
  //! Direct without measuring up to here: with auto_tune, what fits in the
  //! contract's own message; without, the option for the transport.
  static std::size_t direct_rule(const Exchange& ex) noexcept {
    return ex.options().auto_tune ? Exchange::fused_max - sizeof(WireCall) : direct_max(ex);
  }
  static std::size_t direct_max(const Exchange& ex) noexcept {
    return ex.network() ? ex.options().direct_max_bytes_net : ex.options().direct_max_bytes_shm;
  }
  static std::size_t ring_min(const Exchange& ex) noexcept {
    return ex.network() ? ex.options().ring_min_bytes_net : ex.options().ring_min_bytes_shm;
  }

  struct Bucket {
    std::uint8_t chosen = 0;    // 1 + index into candidates; 0: still measuring
    std::vector<double> times;  // this rank's trials so far, in the order they ran (seconds)
    TrialVerdict verdict{};     // from the agreed times, once chosen
  };
  std::array<Bucket, 65> buckets_{};
  std::string_view forced_;  // the algorithm forced by the options or the environment, if any
  std::string force_source_, force_error_;
};

}  // namespace detail::mpi
}  // namespace strata
