#pragma once
//! The pass-through algorithm tag: hand the all-reduce to the backend's own
//! implementation (MPI_Allreduce), after strata's contract check.
//!   comm.all_reduce(grad, strata::Sum, strata::Native{});

#include <string_view>

namespace strata {

//! Reduce policy and algorithm tag: the backend's native all-reduce.
struct Native {
  using reduce_policy = Native;
  static constexpr std::string_view name = "native";
};

}  // namespace strata
