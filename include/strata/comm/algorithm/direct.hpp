#pragma once
//! The direct shared-memory algorithms: every replica sees every buffer, so
//! replica r reduces slice r of all inputs and writes the result straight
//! into slice r of every output. Each input and output byte is read or
//! written exactly once: the memory-traffic lower bound of an all-reduce.
//!   strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Direct> s{strata::cpu_replicas(2)};
//! Deterministic: each element is reduced in replica order 0, 1, ..., p-1.

#include <cstddef>
#include <string_view>

namespace strata {

//! Reduce policy and algorithm tag: the direct shared-memory reduction.
struct Direct {
  using reduce_policy = Direct;
  static constexpr std::string_view name = "direct";
};

//! Reduce policy and algorithm tag: pick ring or direct by message size
//! (CommOptions::auto_ring_min_bytes), the same choice on every replica.
struct AutoReduce {
  using reduce_policy = AutoReduce;
  static constexpr std::string_view name = "auto";
};

}  // namespace strata
