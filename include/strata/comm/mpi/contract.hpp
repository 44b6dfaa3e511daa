#pragma once
//! The collective contract over MPI: before any data moves, every rank's call
//! (sequence number, kind, operation, dtype, element counts, root, algorithm)
//! reaches every other rank in a fixed-size header, and ranks that disagree
//! all raise the same CollectiveMismatch naming who passed what.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <strata/comm/threads/call.hpp>
#include <strata/core/concepts.hpp>

namespace strata::detail::mpi {

//! What one rank called, as it travels (trivially copyable, fixed size).
struct WireCall {
  std::uint64_t seq = 0;
  std::uint64_t in_count = 0;
  std::uint64_t out_count = 0;
  std::int32_t root = 0;
  std::uint8_t kind = 0;
  std::uint8_t op = 0;
  std::uint8_t dtype = 0;
  std::uint8_t algorithm = 0;
  std::uint8_t has_op = 0;
  std::uint8_t separate = 0;  // the direct payload follows in its own message
  std::uint8_t pad[6] = {};
};
static_assert(sizeof(WireCall) == 40);

inline constexpr std::string_view dtype_names[] = {"float32", "float64", "int32", "int64", "bfloat16", "float16"};
inline constexpr std::uint8_t dtype_count = 6;
inline constexpr std::string_view algorithm_names[] = {"", "ring", "direct", "native"};

template <WireElement T>
constexpr std::uint8_t dtype_code() noexcept {
  for (std::uint8_t i = 0; i < dtype_count; ++i)
    if (dtype_names[i] == dtype_name<T>()) return i;
  return 0;
}
//! The name of a dtype code as it travelled ("?" for one no strata sends).
inline std::string_view dtype_name_of(std::uint8_t code) noexcept { return code < dtype_count ? dtype_names[code] : "?"; }
inline std::size_t dtype_bytes(std::uint8_t code) noexcept {
  constexpr std::size_t bytes[] = {4, 8, 4, 8, 2, 2};
  return code < dtype_count ? bytes[code] : 0;
}
inline std::uint8_t algorithm_code(std::string_view a) noexcept {
  for (std::uint8_t i = 0; i < 4; ++i)
    if (algorithm_names[i] == a) return i;
  return 0;
}

inline WireCall to_wire(std::uint64_t seq, const CallDesc& d) {
  WireCall w;
  w.seq = seq;
  w.in_count = d.in_count;
  w.out_count = d.out_count;
  w.root = d.root;
  w.kind = static_cast<std::uint8_t>(d.kind);
  w.op = static_cast<std::uint8_t>(d.op);
  w.has_op = d.has_op;
  w.algorithm = algorithm_code(d.algorithm);
  for (std::uint8_t i = 0; i < dtype_count; ++i)
    if (dtype_names[i] == d.dtype) w.dtype = i;
  return w;
}

inline CallDesc from_wire(const WireCall& w) {
  CallDesc d;
  d.kind = static_cast<CallKind>(w.kind);
  d.op = static_cast<OpKind>(w.op);
  d.has_op = w.has_op != 0;
  d.dtype = d.kind == CallKind::barrier ? std::string_view{} : dtype_name_of(w.dtype);
  d.algorithm = algorithm_names[w.algorithm & 3];
  d.in_count = static_cast<std::size_t>(w.in_count);
  d.out_count = static_cast<std::size_t>(w.out_count);
  d.root = w.root;
  return d;
}

//! Whether two ranks made the same call (the sequence number included).
inline bool same_call(const WireCall& a, const WireCall& b) noexcept {
  return a.seq == b.seq && a.kind == b.kind && a.op == b.op && a.dtype == b.dtype && a.algorithm == b.algorithm &&
         a.has_op == b.has_op && a.root == b.root && a.in_count == b.in_count && a.out_count == b.out_count &&
         a.separate == b.separate;
}

//! Every rank's all-reduce or barrier equals rank `me`'s and is valid (the
//! common case, checked without allocating); anything else takes contract_violation.
inline bool all_same_plain_call(const std::vector<WireCall>& calls, int me) noexcept {
  const auto& a = calls[static_cast<std::size_t>(me)];
  if (a.kind != static_cast<std::uint8_t>(CallKind::all_reduce) && a.kind != static_cast<std::uint8_t>(CallKind::barrier))
    return false;
  if (a.in_count != a.out_count) return false;
  return std::all_of(calls.begin(), calls.end(), [&](const auto& b) { return same_call(a, b); });
}

//! Empty when the calls of all ranks (index = rank) agree; otherwise the
//! message every rank raises: what is wrong, which ranks differ from rank 0,
//! and what each rank passed.
inline std::string contract_violation(const std::vector<WireCall>& calls, int me) {
  const std::size_t p = calls.size();
  std::vector<CallDesc> descs;
  descs.reserve(p);
  for (const auto& w : calls) descs.push_back(from_wire(w));
  std::vector<const CallDesc*> ptrs;
  for (const auto& d : descs) ptrs.push_back(&d);
  std::string why;
  bool seq_differs = false;
  for (const auto& w : calls) seq_differs = seq_differs || w.seq != calls[0].seq;
  if (seq_differs) why = "ranks are at different collectives (one called a collective the others skipped)";
  else why = check_agreement(ptrs);
  if (why.empty()) return {};
  // check_agreement speaks of replicas; these are ranks
  for (std::size_t pos; (pos = why.find("replica")) != std::string::npos;) why.replace(pos, 7, "rank");
  std::string odd;
  for (std::size_t r = 1; r < p; ++r) {
    if (same_call(calls[r], calls[0])) continue;
    if (!odd.empty()) odd += ", ";
    odd += std::to_string(r);
  }
  std::string msg = "strata: collective #" + std::to_string(calls[static_cast<std::size_t>(me)].seq) + " on rank " +
                    std::to_string(me) + ": " + why;
  if (!odd.empty()) msg += "; rank(s) " + odd + " disagree with rank 0";
  msg += ":";
  for (std::size_t r = 0; r < p; ++r)
    msg += "\n  rank " + std::to_string(r) + " called #" + std::to_string(calls[r].seq) + " " + descs[r].str();
  return msg;
}

//! The direct algorithm's payload, when it travels apart from the header,
//! goes in messages of at most 32 KiB over TCP (under Open MPI's eager
//! limit of 64 KiB, so that they leave at once instead of waiting for the
//! receiver's handshake) and as one message in shared memory (the
//! single-copy path is faster): f(offset, length) for each, sender and
//! receiver splitting `bytes` alike.
template <class F>
void each_payload_block(std::size_t bytes, bool network, F f) {
  const std::size_t block = network ? std::size_t{32} << 10 : SIZE_MAX;
  for (std::size_t off = 0; off < bytes; off += block) f(off, std::min(block, bytes - off));
}

}  // namespace strata::detail::mpi
