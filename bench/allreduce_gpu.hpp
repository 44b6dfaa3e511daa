#pragma once
// allreduce_bench --device gpu (bench/allreduce_gpu.cpp, built with the CUDA backend).
#include <cstddef>
#include <vector>

namespace bench {
//! Prints the virtual-GPU all-reduce table for each replica count; 1 if any result was wrong.
int gpu_all_reduce(const std::vector<int>& replicas, std::size_t min_bytes, std::size_t max_bytes, bool in_place);
}  // namespace bench
