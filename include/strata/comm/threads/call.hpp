#pragma once
//! The description of one collective call that every replica publishes, so
//! that replicas which disagree are caught before any memory is touched.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <strata/comm/reduce_op.hpp>
#include <strata/core/partition.hpp>

namespace strata::detail {

enum class CallKind : unsigned char { barrier, all_reduce, broadcast, reduce_scatter, all_gather, reduce_to_one };

inline constexpr std::string_view call_name(CallKind k) noexcept {
  switch (k) {
    case CallKind::barrier: return "barrier";
    case CallKind::all_reduce: return "all_reduce";
    case CallKind::broadcast: return "broadcast";
    case CallKind::reduce_scatter: return "reduce_scatter";
    case CallKind::all_gather: return "all_gather";
    case CallKind::reduce_to_one: return "reduce_to_one";
  }
  return "?";
}

struct CallDesc {
  CallKind kind = CallKind::barrier;
  OpKind op = OpKind::sum;
  std::string_view dtype{};
  std::size_t in_count = 0;
  std::size_t out_count = 0;
  int root = 0;
  bool has_op = false;
  std::string_view algorithm{};  // replicas must also agree on how

  [[nodiscard]] std::string str() const {
    std::string s{call_name(kind)};
    s += "(";
    if (kind != CallKind::barrier) {
      if (has_op) s += std::string(op_name(op)) + ", ";
      s += std::string(dtype) + ", " + std::to_string(in_count) + " elements";
      if (kind == CallKind::reduce_scatter || kind == CallKind::all_gather)
        s += " in, " + std::to_string(out_count) + " out";
      if (kind == CallKind::broadcast || kind == CallKind::reduce_to_one) s += ", root " + std::to_string(root);
      if (!algorithm.empty()) s += ", " + std::string(algorithm);
    }
    return s + ")";
  }
};

//! Empty when the p descriptions form one valid call; otherwise what is wrong.
inline std::string check_agreement(const std::vector<const CallDesc*>& d) {
  const std::size_t p = d.size();
  const CallDesc& a = *d[0];
  for (std::size_t r = 1; r < p; ++r) {
    const CallDesc& b = *d[r];
    if (b.kind != a.kind || b.op != a.op || b.dtype != a.dtype || b.algorithm != a.algorithm)
      return "replicas called different collectives";
    if (a.kind == CallKind::all_gather) {
      if (b.out_count != a.out_count) return "all_gather output sizes differ";
    } else if (b.in_count != a.in_count) {
      return "element counts differ";
    }
    if (b.root != a.root) return "roots differ";
  }
  if ((a.kind == CallKind::broadcast || a.kind == CallKind::reduce_to_one) &&
      (a.root < 0 || static_cast<std::size_t>(a.root) >= p))
    return "root " + std::to_string(a.root) + " is not a replica (there are " + std::to_string(p) + ")";
  for (std::size_t r = 0; r < p; ++r) {
    const CallDesc& b = *d[r];
    if (a.kind == CallKind::reduce_scatter && b.out_count != shard_range(b.in_count, p, r).size())
      return "replica " + std::to_string(r) + "'s output holds " + std::to_string(b.out_count) +
             " elements but its shard of " + std::to_string(b.in_count) + " has " +
             std::to_string(shard_range(b.in_count, p, r).size()) + " (see strata::shard_range)";
    if (a.kind == CallKind::all_reduce && b.out_count != b.in_count)
      return "replica " + std::to_string(r) + "'s output holds " + std::to_string(b.out_count) +
             " elements but its input " + std::to_string(b.in_count);
    if (a.kind == CallKind::reduce_to_one && static_cast<int>(r) == a.root && b.out_count != b.in_count)
      return "the root's output holds " + std::to_string(b.out_count) + " elements but the inputs " +
             std::to_string(b.in_count);
  }
  if (a.kind == CallKind::all_gather) {
    std::size_t total = 0;
    for (auto* x : d) total += x->in_count;
    if (total != a.out_count)
      return "all_gather outputs hold " + std::to_string(a.out_count) + " elements but the inputs add up to " +
             std::to_string(total);
  }
  return {};
}

}  // namespace strata::detail
