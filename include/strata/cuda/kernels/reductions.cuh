#pragma once
//! Reductions: column sums (deterministic, no atomics: a fixed partition of
//! the rows into chunks, each summed by a fixed tree, then the chunk sums
//! reduced the same way) and the L2 penalty's sum of squares (CUB block
//! reduce, one atomic add of a double per block), and the count of NaN and
//! infinite values (one atomic add per block that found any: exact).
//!   strata::cuda::detail::launch_column_sums(s, dy, db, rows, cols);   // db[j] = sum over rows of dy[r, j]
//!   strata::cuda::detail::launch_add_square_sum(s, w, n, 0.5f * l2, acc);
//!   strata::cuda::detail::launch_count_nonfinite(s, grad, n, bad);

#include <cub/block/block_reduce.cuh>

#include <strata/cuda/kernels/common.cuh>

namespace strata::cuda::detail {

constexpr unsigned column_tile = 32;   // columns per block: one coalesced 128-byte row segment
constexpr unsigned column_lanes = 8;   // threads per column, each summing every 8th row of the chunk
constexpr std::size_t min_rows_per_chunk = 512;

//! out[blockIdx.y, j] = the sum of x[r, j] over the rows of chunk blockIdx.y.
__global__ void column_partial_kernel(const float* x, float* out, std::size_t rows, std::size_t cols,
                                      std::size_t rows_per_chunk) {
  __shared__ float part[column_lanes][column_tile + 1];
  const std::size_t col = std::size_t{blockIdx.x} * column_tile + threadIdx.x;
  const std::size_t r0 = std::size_t{blockIdx.y} * rows_per_chunk;
  const std::size_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float s = 0.f;
  if (col < cols)
    for (std::size_t r = r0 + threadIdx.y; r < r1; r += column_lanes) s += x[r * cols + col];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float t = part[0][threadIdx.x];
    for (unsigned k = 1; k < column_lanes; ++k) t += part[k][threadIdx.x];
    out[std::size_t{blockIdx.y} * cols + col] = t;
  }
}

void launch_column_sums(cudaStream_t s, const float* x, float* out, std::size_t rows, std::size_t cols) {
  if (cols == 0) return;
  if (rows == 0) return launch_fill(s, out, 0.f, cols);
  const std::size_t per_chunk = std::max(min_rows_per_chunk, (rows + 65534) / 65535);
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
  square_sum_kernel<<<std::min(blocks_for(n), 1024u), block_threads, 0, s>>>(x, n, static_cast<double>(k), acc);
  check_launch("square_sum_kernel");
}

__global__ void count_nonfinite_kernel(const float* x, std::size_t n, double* acc) {
  int bad = 0;
  for (std::size_t i = global_index(); i < n; i += grid_stride()) bad += !isfinite(x[i]);
  using Reduce = cub::BlockReduce<int, block_threads>;
  __shared__ typename Reduce::TempStorage temp;
  const int total = Reduce(temp).Sum(bad);
  if (threadIdx.x == 0 && total) atomicAdd(acc, static_cast<double>(total));
}

void launch_count_nonfinite(cudaStream_t s, const float* x, std::size_t n, double* acc) {
  if (n == 0) return;
  count_nonfinite_kernel<<<std::min(blocks_for(n), 1024u), block_threads, 0, s>>>(x, n, acc);
  check_launch("count_nonfinite_kernel");
}

}  // namespace strata::cuda::detail
