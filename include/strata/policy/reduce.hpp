#pragma once
//! ReducePolicy: how replicas' values are combined. Ring, Direct and
//! AutoReduce are the all-reduce algorithms (comm/algorithm/); ReduceToOne
//! reduces onto one central copy; PushPull goes through parameter servers;
//! NoReduce is for a single replica.

#include <concepts>
#include <string_view>

#include <strata/comm/algorithm/direct.hpp>
#include <strata/comm/algorithm/native.hpp>
#include <strata/comm/algorithm/ring.hpp>

namespace strata {

//! Gradients are reduced onto the single central copy of each variable
//! (each replica reduces a slice of it, in parallel).
struct ReduceToOne {
  using reduce_policy = ReduceToOne;
  static constexpr std::string_view name = "reduce_to_one";
};

//! Workers push gradients to the servers holding each shard, which apply
//! them; workers pull the shards back (no collective among workers).
struct PushPull {
  using reduce_policy = PushPull;
  static constexpr std::string_view name = "push_pull";
};

//! Nothing to reduce: a single replica.
struct NoReduce {
  using reduce_policy = NoReduce;
  static constexpr std::string_view name = "none";
};

//! A type that opts into being a reduce policy.
template <class R>
concept ReducePolicy = std::same_as<typename R::reduce_policy, R>;

namespace detail {
//! The algorithm an explicit all-reduce in a replica uses under policy R.
template <ReducePolicy R>
using all_reduce_algorithm_t =
    std::conditional_t<std::same_as<R, Ring> || std::same_as<R, Direct>, R, AutoReduce>;
}  // namespace detail

}  // namespace strata
