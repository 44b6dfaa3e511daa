// The reference: Open MPI's MPI_Allreduce (float sum, in place) over the same
// sizes and with the same columns as allreduce_bench.
//   mpirun -np 2 mpi_allreduce_bench [--min 1K] [--max 64M]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  std::size_t min_bytes = 1024, max_bytes = std::size_t{64} << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--min") min_bytes = bench::parse_size(argv[i + 1]);
    else if (k == "--max") max_bytes = bench::parse_size(argv[i + 1]);
  }
  if (rank == 0) {
    std::printf("# MPI_Allreduce (in place, sum) over %d ranks\n", p);
    std::printf("# %8s %12s %6s %3s %-7s %10s %8s %8s %6s\n", "size(B)", "count", "type", "p", "algo", "time(us)",
                "algbw", "busbw", "wrong");
  }
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::size_t n = bytes / sizeof(float);
    const int iters = bench::iterations_for(bytes, p);
    std::vector<float> v(n, 0.f);
    for (int i = 0; i < 3; ++i) MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t = (MPI_Wtime() - t0) / iters;
    std::fill(v.begin(), v.end(), static_cast<float>(rank + 1));
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    for (float x : v) wrong += x != static_cast<float>(p * (p + 1) / 2);
    long total = 0;
    MPI_Reduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const double algbw = static_cast<double>(bytes) / t / 1e9;
      std::printf("%10zu %12zu %6s %3d %-7s %10.1f %8.2f %8.2f %6ld\n", bytes, n, "float", p, "mpi", t * 1e6, algbw,
                  algbw * 2.0 * (p - 1) / p, total);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
}
