// All-reduce over MPI: strata's algorithms (ring, direct, native pass-through,
// and the automatic choice, each with the collective contract on) next to
// plain MPI_Allreduce, measured in the same run, interleaved size by size so
// that a busy machine disturbs them alike. nccl-tests columns: algbw = S/t,
// busbw = algbw * 2(p-1)/p; "vs mpi" = MPI_Allreduce's time / this time
// (above 1: faster than MPI_Allreduce). At the end, the decision table:
// per size, what auto chose (after measuring its first calls of that size
// class: those are this bench's warm-up), every algorithm's time, and auto
// against native and MPI_Allreduce (the promise: "vs mpi" at least 0.95),
// then the same "vs mpi" on one line (docs/performance.md records five runs of it).
//   mpirun -np 2 mpi_allreduce_bench [--min 1K] [--max 64M] [--rounds 5]
//   mpirun -np 2 --mca btl self,tcp mpi_allreduce_bench     # over TCP
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <strata/comm/mpi/communicator.hpp>

#include "bench_util.hpp"

int main(int argc, char** argv) {
  strata::detail::mpi::runtime();
  std::size_t min_bytes = 1024, max_bytes = std::size_t{64} << 20;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--min") min_bytes = bench::parse_size(argv[i + 1]);
    else if (k == "--max") max_bytes = bench::parse_size(argv[i + 1]);
    else if (k == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  auto comm = strata::MpiCommunicator::world();
  const int rank = comm.rank(), p = comm.size();
  if (rank == 0) {
    std::printf("# all-reduce (in place, float sum) over %d ranks, %s; best of %d rounds\n", p,
                comm.shares_memory() ? "shared memory" : "network", rounds);
    std::printf("# %8s %10s %3s %-7s %10s %8s %8s %7s %6s  %s\n", "size(B)", "count", "p", "algo", "time(us)", "algbw",
                "busbw", "vs mpi", "wrong", "auto's choice");
  }
  struct Algo {
    const char* name;
    std::function<void(std::vector<float>&)> run;
    std::size_t max_bytes;
  };
  const std::vector<Algo> algos{
      {"mpi", [](std::vector<float>& v) {
         MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
       }, SIZE_MAX},
      {"auto", [&](std::vector<float>& v) { comm.all_reduce(v, strata::Sum); }, SIZE_MAX},
      {"native", [&](std::vector<float>& v) { comm.all_reduce(v, strata::Sum, strata::Native{}); }, SIZE_MAX},
      {"ring", [&](std::vector<float>& v) { comm.all_reduce(v, strata::Sum, strata::Ring{}); }, SIZE_MAX},
      {"direct", [&](std::vector<float>& v) { comm.all_reduce(v, strata::Sum, strata::Direct{}); },
       std::size_t{1} << 20},
  };
  struct Row {
    std::size_t bytes;
    std::vector<double> t;  // per algorithm (0: not run)
    strata::AutoChoice choice;
  };
  std::vector<Row> table;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::size_t n = bytes / sizeof(float);
    const int max_iters = bench::iterations_for(bytes, p);
    std::vector<float> v(n, 0.f);
    std::vector<double> best(algos.size(), 1e30);
    for (int round = 0; round < rounds; ++round)
      for (std::size_t a = 0; a < algos.size(); ++a) {
        if (bytes > algos[a].max_bytes) continue;
        // warm up, and size the round to about 0.1 s (rank 0 decides: every rank must call as often)
        MPI_Barrier(MPI_COMM_WORLD);
        double w0 = MPI_Wtime();
        for (int i = 0; i < 3; ++i) algos[a].run(v);
        int iters = std::clamp(static_cast<int>(0.1 / std::max((MPI_Wtime() - w0) / 3, 1e-9)), 3, max_iters);
        MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (int i = 0; i < iters; ++i) algos[a].run(v);
        double t = (MPI_Wtime() - t0) / iters, slowest = 0;
        MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the collective ends with its last rank
        best[a] = std::min(best[a], slowest);
      }
    for (std::size_t a = 0; a < algos.size(); ++a) {
      if (bytes > algos[a].max_bytes) continue;
      std::fill(v.begin(), v.end(), static_cast<float>(rank + 1));  // exact sums: correctness of the last call
      algos[a].run(v);
      long wrong = 0, total = 0;
      for (float x : v) wrong += x != static_cast<float>(p * (p + 1) / 2);
      MPI_Reduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        const double t = best[a], algbw = static_cast<double>(bytes) / t / 1e9;
        std::printf("%10zu %10zu %3d %-7s %10.1f %8.2f %8.2f %7.2f %6ld  %s\n", bytes, n, p, algos[a].name, t * 1e6,
                    algbw, algbw * 2.0 * (p - 1) / p, best[0] / t, total,
                    a == 1 ? std::string(comm.auto_choice(bytes).algorithm).c_str() : "");
      }
    }
    Row row{bytes, std::vector<double>(algos.size(), 0.0), comm.auto_choice(bytes)};
    for (std::size_t a = 0; a < algos.size(); ++a)
      if (bytes <= algos[a].max_bytes) row.t[a] = best[a];
    table.push_back(std::move(row));
    if (rank == 0) std::fflush(stdout);
  }
  if (rank != 0) return 0;
  std::printf("\n# decision table: auto's choice by size (times in us, best of %d rounds; vs = other's time / auto's)\n",
              rounds);
  std::printf("# %8s %-7s %10s %10s %10s %10s %10s %9s %7s\n", "size(B)", "chosen", "mpi", "native", "ring", "direct",
              "auto", "vs native", "vs mpi");
  for (const auto& r : table) {
    auto us = [&](std::size_t a) { return r.t[a] > 0 ? std::to_string(static_cast<long long>(r.t[a] * 1e6 + 0.5)) : "-"; };
    std::printf("%10zu %-7s %10s %10s %10s %10s %10s %9.2f %7.2f\n", r.bytes, std::string(r.choice.algorithm).c_str(),
                us(0).c_str(), us(2).c_str(), us(3).c_str(), us(4).c_str(), us(1).c_str(), r.t[2] / r.t[1],
                r.t[0] / r.t[1]);
  }
  std::printf("# auto vs mpi:");
  for (const auto& r : table)
    std::printf(" %zu%s %.2f", r.bytes >= (std::size_t{1} << 20) ? r.bytes >> 20 : r.bytes >> 10,
                r.bytes >= (std::size_t{1} << 20) ? "M" : "K", r.t[0] / r.t[1]);
  std::printf("\n# why:\n");
  for (const auto& r : table) std::printf("#   %s\n", r.choice.reason.c_str());
}
