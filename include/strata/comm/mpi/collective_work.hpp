#pragma once
//! The work of the MPI collectives other than all-reduce (all_reduce.hpp
//! has its algorithms): barrier, broadcast, reduce-scatter and all-gather,
//! each the contract's exchange and then one non-blocking MPI collective
//! waited for under the deadline, or, for a reduce-scatter or all-gather of
//! ring_blocks_min_bytes or more, strata's ring over contiguous blocks
//! (its steps under the deadline, naming the neighbour that did not deliver). MpiCommunicator runs them on the caller's
//! thread or on its progress thread, the blocking and the non-blocking forms
//! alike, always under the MPI lock (runtime.hpp).
//!   detail::mpi::broadcast_work(exchange, data, n, /*root=*/0);

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <strata/comm/mpi/all_reduce.hpp>
#include <strata/comm/mpi/exchange.hpp>
#include <strata/comm/mpi/handles.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>

namespace strata::detail::mpi {

//! `n` elements of `src` copied into the exchange's staging (an input
//! that overlaps the output; kept alive with the call if it is abandoned).
template <class T>
const T* staged_copy(Exchange& ex, const T* src, std::size_t n) {
  auto& st = ex.staging();
  if (st.size() < n * sizeof(T)) st.resize(n * sizeof(T));
  std::memcpy(st.data(), src, n * sizeof(T));
  return reinterpret_cast<const T*>(st.data());
}

inline void barrier_work(Exchange& ex) {
  const CallDesc d{.kind = CallKind::barrier};
  ex.done(ex.enter(d, nullptr, 0));
}

template <class T>
void broadcast_work(Exchange& ex, T* data, std::size_t n, int root) {
  const CallDesc d{.kind = CallKind::broadcast, .dtype = dtype_name<T>(), .in_count = n, .out_count = n, .root = root};
  const auto seq = ex.enter(d, nullptr, 0);
  if (n) {
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibcast(data, as_count(n, "broadcast"), datatype<T>(), root, ex.comm(), &req), "MPI_Ibcast");
    ex.wait_collective(req, "MPI_Ibcast (root rank " + std::to_string(root) + ")");
  }
  ex.done(seq);
}

//! From this many bytes (and 2+ ranks) reduce-scatter and all-gather run
//! strata's ring over contiguous blocks (comm/algorithm/ring.hpp) instead of
//! Open MPI's MPI_Ireduce_scatter and MPI_Iallgatherv, whose large messages
//! run 2-3x slower than the ring and allocate temporaries of the whole
//! message (docs/performance.md, "ZeRO stages 2 and 3 across workers"). The
//! same on every rank: the contract makes the sizes agree.
inline constexpr std::size_t ring_blocks_min_bytes = std::size_t{256} << 10;

//! The reduce-scatter of `src` (n elements) over the ring, block r
//! (shard_range(n, p, r)) into `dst`: piece by piece (each block cut into
//! pieces of at most ring_chunk_bytes), the p blocks' piece c side by side in
//! the exchange's scratch, so the working memory is p pieces whatever n.
template <ReduceOperation Op, class T>
void ring_reduce_scatter_work(Exchange& ex, const T* src, std::size_t n, T* dst) {
  const auto p = static_cast<std::size_t>(ex.size()), r = static_cast<std::size_t>(ex.rank());
  const std::size_t chunk = std::max<std::size_t>(1, ex.options().ring_chunk_bytes / sizeof(T));
  const std::size_t largest = shard_range(n, p, 0).size();
  const std::size_t pieces = std::max<std::size_t>(1, (largest + chunk - 1) / chunk);
  const std::size_t slot = shard_range(largest, pieces, 0).size();
  auto& sc = ex.scratch();
  if (sc.size() < p * slot * sizeof(T)) sc.resize(p * slot * sizeof(T));
  T* w = reinterpret_cast<T*>(sc.data());
  const Range mine = shard_range(n, p, r);
  for (std::size_t c = 0; c < pieces; ++c) {
    auto piece = [&](std::size_t b) {
      const Range blk = shard_range(n, p, b), s = shard_range(blk.size(), pieces, c);
      return Range{blk.begin + s.begin, blk.begin + s.end};
    };
    for (std::size_t b = 0; b < p; ++b) std::copy_n(src + piece(b).begin, piece(b).size(), w + b * slot);
    MpiRingLink<T> link(ex, w);
    ring_reduce_scatter_blocks<Op, T>(link, [&](std::size_t b) { return Range{b * slot, b * slot + piece(b).size()}; });
    std::copy_n(w + r * slot, piece(r).size(), dst + (piece(r).begin - mine.begin));
  }
}

template <ReduceOperation Op, class T>
void reduce_scatter_work(Exchange& ex, const T* src, std::size_t n, T* dst, std::size_t out_n) {
  const int p = ex.size();
  const CallDesc d{.kind = CallKind::reduce_scatter, .op = Op::kind, .dtype = dtype_name<T>(), .in_count = n,
                   .out_count = out_n, .has_op = true};
  const auto seq = ex.enter(d, nullptr, 0);
  if (n && p > 1 && n * sizeof(T) >= ring_blocks_min_bytes && !overlaps(src, n, dst, out_n)) {
    ring_reduce_scatter_work<Op>(ex, src, n, dst);
  } else if (n) {
    std::vector<int>& counts = ex.counts();  // MPI reads it until the call completes
    counts.resize(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r)
      counts[static_cast<std::size_t>(r)] =
          as_count(shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r)).size(), "reduce_scatter");
    if (overlaps(src, n, dst, out_n)) src = staged_copy(ex, src, n);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter(src, dst, counts.data(), datatype<T>(), op_of<Op, T>(), ex.comm(), &req),
          "MPI_Ireduce_scatter");
    ex.wait_collective(req, "MPI_Ireduce_scatter");
    finalize<Op>(dst, out_n, static_cast<std::size_t>(p));
  }
  ex.done(seq);
}

template <class T>
void all_gather_work(Exchange& ex, const T* src, std::size_t n, T* out, std::size_t out_n) {
  const int p = ex.size();
  const CallDesc d{.kind = CallKind::all_gather, .dtype = dtype_name<T>(), .in_count = n, .out_count = out_n};
  const auto seq = ex.enter(d, nullptr, 0);
  std::vector<int>& counts = ex.counts();  // MPI reads both until the call completes
  std::vector<int>& displs = ex.displs();
  counts.resize(static_cast<std::size_t>(p));
  displs.resize(static_cast<std::size_t>(p));
  std::size_t off = 0;
  for (int r = 0; r < p; ++r) {
    const auto c = static_cast<std::size_t>(ex.call_of(r).in_count);
    counts[static_cast<std::size_t>(r)] = as_count(c, "all_gather");
    displs[static_cast<std::size_t>(r)] = as_count(off, "all_gather");
    off += c;
  }
  if (off && p > 1 && off * sizeof(T) >= ring_blocks_min_bytes && !overlaps(src, n, out, off)) {
    // the ring over the blocks in place in `out`: this rank's first, the others' passed round
    const auto r = static_cast<std::size_t>(ex.rank());
    std::copy_n(src, n, out + displs[r]);
    MpiRingLink<T> link(ex, out);
    ring_all_gather_blocks<T>(link, [&](std::size_t b) {
      const auto at = static_cast<std::size_t>(displs[b]);
      return Range{at, at + static_cast<std::size_t>(counts[b])};
    });
  } else if (off) {
    if (overlaps(src, n, out, off)) src = staged_copy(ex, src, n);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Iallgatherv(src, counts[static_cast<std::size_t>(ex.rank())], datatype<T>(), out, counts.data(),
                          displs.data(), datatype<T>(), ex.comm(), &req),
          "MPI_Iallgatherv");
    ex.wait_collective(req, "MPI_Iallgatherv");
  }
  ex.done(seq);
}

}  // namespace strata::detail::mpi
