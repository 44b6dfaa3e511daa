#pragma once
//! Reductions: column sums (deterministic, no atomics: a fixed partition of
//! the rows into chunks, each summed by a fixed tree, then the chunk sums
//! reduced the same way) and the L2 penalty's sum of squares (CUB block
//! reduce, one atomic add of a double per block), and the count of NaN and
//! infinite values (one atomic add per block that found any: exact). The
//! column sums' chunk, lane and lane-total and a thread's share of the
//! non-finite count are bodies/reductions.hpp's, which a GPU's stand-in runs
//! over the same grid (kernels/host/grid_loops.hpp).
//!   strata::cuda::detail::launch_column_sums(s, dy, db, rows, cols);   // db[j] = sum over rows of dy[r, j]
//!   strata::cuda::detail::launch_add_square_sum(s, w, n, 0.5f * l2, acc);
//!   strata::cuda::detail::launch_count_nonfinite(s, grad, n, bad);

#include <cub/block/block_reduce.cuh>

#include <strata/cuda/kernels/common.cuh>
#include <strata/kernels/bodies/reductions.hpp>

namespace strata::cuda::detail {

using bodies::column_lanes;
using bodies::column_tile;

//! out[blockIdx.y, j] = the sum of x[r, j] over the rows of chunk blockIdx.y (bodies/reductions.hpp).
__global__ void column_partial_kernel(const float* x, float* out, std::size_t rows, std::size_t cols,
                                      std::size_t rows_per_chunk) {
  __shared__ float part[column_lanes][column_tile + 1];
  const std::size_t col = std::size_t{blockIdx.x} * column_tile + threadIdx.x;
  const std::size_t r0 = std::size_t{blockIdx.y} * rows_per_chunk;
  const std::size_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  part[threadIdx.y][threadIdx.x] = col < cols ? bodies::column_lane_sum(x, cols, col, r0, r1, threadIdx.y) : 0.f;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols)
    out[std::size_t{blockIdx.y} * cols + col] = bodies::column_lanes_total(&part[0][threadIdx.x], column_tile + 1);
}

void launch_column_sums(cudaStream_t s, const float* x, float* out, std::size_t rows, std::size_t cols) {
  if (cols == 0) return;
  if (rows == 0) return launch_fill(s, out, 0.f, cols);
  const std::size_t per_chunk = bodies::column_chunk_rows(rows);
  const std::size_t chunks = (rows + per_chunk - 1) / per_chunk;
  const std::size_t tiles = (cols + column_tile - 1) / column_tile;
  if (tiles > 0x7fffffffu) throw ShapeError("column_sums: " + std::to_string(cols) + " columns exceed one grid");
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)), block(column_tile, column_lanes);
  if (chunks == 1) {
    column_partial_kernel<<<grid, block, 0, s>>>(x, out, rows, cols, per_chunk);
    check_launch("column_partial_kernel");
    return;
  }
  // Tall inputs: the chunk sums go to scratch (stream-ordered, so this stays
  // capturable into a graph), then are summed the same way.
  void* scratch = nullptr;
  int device = -1;
  cuda::detail::ignore(cudaGetDevice(&device));
  const std::size_t bytes = chunks * cols * sizeof(float);
  check_allocation(cudaMallocAsync(&scratch, bytes, s), "cudaMallocAsync (column_sums scratch)", bytes, device);
  auto* partial = static_cast<float*>(scratch);
  column_partial_kernel<<<grid, block, 0, s>>>(x, partial, rows, cols, per_chunk);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    try {
      launch_column_sums(s, partial, out, chunks, cols);
    } catch (...) {
      cuda::detail::ignore(cudaFreeAsync(scratch, s));
      throw;
    }
  }
  check(cudaFreeAsync(scratch, s), "cudaFreeAsync (column_sums scratch)");
  check(launched, "column_partial_kernel");
}

__global__ void square_sum_kernel(const float* x, std::size_t n, double k, double* acc) {
  using Reduce = cub::BlockReduce<double, block_threads>;
  __shared__ typename Reduce::TempStorage temp;
  double s = 0;
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const double v = x[i];
    s += v * v;
  }
  const double total = Reduce(temp).Sum(s);
  if (threadIdx.x == 0) atomicAdd(acc, k * total);
}

void launch_add_square_sum(cudaStream_t s, const float* x, std::size_t n, float k, double* acc) {
  if (n == 0) return;
  square_sum_kernel<<<std::min(blocks_for(n), reduce_blocks), block_threads, 0, s>>>(x, n, static_cast<double>(k), acc);
  check_launch("square_sum_kernel");
}

__global__ void count_nonfinite_kernel(const float* x, std::size_t n, double* acc) {
  const int bad = bodies::nonfinite_strided(x, n, global_index(), grid_stride());
  using Reduce = cub::BlockReduce<int, block_threads>;
  __shared__ typename Reduce::TempStorage temp;
  const int total = Reduce(temp).Sum(bad);
  if (threadIdx.x == 0 && total) atomicAdd(acc, static_cast<double>(total));
}

void launch_count_nonfinite(cudaStream_t s, const float* x, std::size_t n, double* acc) {
  if (n == 0) return;
  count_nonfinite_kernel<<<std::min(blocks_for(n), reduce_blocks), block_threads, 0, s>>>(x, n, acc);
  check_launch("count_nonfinite_kernel");
}

}  // namespace strata::cuda::detail
