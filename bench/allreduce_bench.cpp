// All-reduce over CPU replicas, nccl-tests style: for each algorithm and
// replica count, size from --min to --max (x4 steps), time per call, algbw,
// busbw, the fraction of the memory-traffic bound, and a correctness check.
// With --device gpu: virtual GPUs on GPU 0 (bench/allreduce_gpu.cpp).
//   allreduce_bench [--replicas 2,4] [--algo ring,direct,auto] [--min 1K] [--max 64M] [--out-of-place]
//   allreduce_bench --device gpu [--replicas 2,4,8] [--min 4K] [--max 256M]
#include <cstdio>
#include <string>
#include <strata/strata.hpp>

#include "bench_util.hpp"
#if STRATA_HAS_CUDA
#include "allreduce_gpu.hpp"
#endif

namespace {

struct Args {
  std::vector<int> replicas{2};
  std::vector<std::string> algos{"ring", "direct", "auto"};
  std::size_t min_bytes = 1024, max_bytes = std::size_t{64} << 20;
  bool in_place = true;
  bool gpu = false;
  bool sizes_given = false, replicas_given = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "allreduce_bench: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--replicas") a.replicas = bench::parse_ints(next()), a.replicas_given = true;
    else if (k == "--algo") a.algos = bench::split_commas(next());
    else if (k == "--min") a.min_bytes = bench::parse_size(next()), a.sizes_given = true;
    else if (k == "--max") a.max_bytes = bench::parse_size(next()), a.sizes_given = true;
    else if (k == "--out-of-place") a.in_place = false;
    else if (k == "--device") {
      const std::string d = next();
      if (d != "cpu" && d != "gpu") {
        std::fprintf(stderr, "allreduce_bench: --device is cpu or gpu, got '%s'\n", d.c_str());
        std::exit(2);
      }
      a.gpu = d == "gpu";
    } else {
      std::fprintf(stderr, "usage: allreduce_bench [--device cpu|gpu] [--replicas 2,4] [--algo ring,direct,auto] [--min 1K] [--max 64M] [--out-of-place]\n");
      std::exit(2);
    }
  }
  return a;
}

template <class Algo>
void sweep(int p, const Args& a) {
  strata::Strategy<strata::Synchronous, strata::Mirrored, Algo> s{strata::cpu_replicas(p)};
  for (std::size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 4) {
    const std::size_t n = bytes / sizeof(float);
    const int iters = bench::iterations_for(bytes, p);
    auto res = s.run([&](auto& ctx) {
      const int r = ctx.replica_id_in_sync_group();
      std::vector<float> in(n, 0.f), out(n, 0.f);
      auto once = [&] {
        if (a.in_place) ctx.all_reduce(in, strata::Sum);
        else ctx.all_reduce(in, out, strata::Sum);
      };
      for (int i = 0; i < 3; ++i) once();  // warm up: pages touched, caches primed
      ctx.barrier();
      const double t0 = bench::now_s();
      for (int i = 0; i < iters; ++i) once();
      ctx.barrier();
      const double t = (bench::now_s() - t0) / iters;
      // Correctness: every element must be 1 + 2 + ... + p.
      std::fill(in.begin(), in.end(), static_cast<float>(r + 1));
      once();
      const float want = static_cast<float>(p * (p + 1) / 2);
      const auto& got = a.in_place ? in : out;
      long wrong = 0;
      for (float v : got) wrong += v != want;
      return std::pair{t, wrong};
    });
    long wrong = 0;
    for (auto& [t, w] : res) wrong += w;
    const double t = res[0].first;
    const double algbw = static_cast<double>(bytes) / t / 1e9;
    const double busbw = algbw * 2.0 * (p - 1) / p;
    // Bound: each replica's buffer read and written once, by the fastest of
    // three streaming kernels on the same working set (p buffers of this size).
    const double bound_busbw = static_cast<double>(bytes) / bench::rw_pass_time(p, bytes) * 2.0 * (p - 1) / p / 1e9;
    std::printf("%10zu %12zu %6s %3d %-7s %10.1f %8.2f %8.2f %8.2f %7.0f%% %6ld\n", bytes, n, "float", p,
                std::string(Algo::name).c_str(), t * 1e6, algbw, busbw, bound_busbw, 100.0 * busbw / bound_busbw, wrong);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.gpu) {
#if STRATA_HAS_CUDA
    if (!a.replicas_given) a.replicas = {2, 4, 8};
    if (!a.sizes_given) a.min_bytes = 4096, a.max_bytes = std::size_t{256} << 20;
    return bench::gpu_all_reduce(a.replicas, a.min_bytes, a.max_bytes, a.in_place);
#else
    std::fprintf(stderr, "allreduce_bench: --device gpu needs the CUDA backend (configure with -Dcuda=enabled)\n");
    return 2;
#endif
  }
  std::printf("# strata all-reduce over CPU replicas (%s, sum)\n", a.in_place ? "in place" : "out of place");
  for (int p : a.replicas) {
    const std::size_t big = std::size_t{256} << 20;
    const double bw = 2.0 * static_cast<double>(big) * p / bench::rw_pass_time(p, big);
    std::printf("# replicas %d: DRAM bandwidth, %d threads each reading and writing its own 256 MiB: %.1f GB/s\n", p, p,
                bw / 1e9);
    std::printf("# bound = busbw if each replica's buffer were read and written once at the speed measured for the\n"
                "# same working set (p buffers of that size); %%bound = busbw / bound\n");
    std::printf("# %8s %12s %6s %3s %-7s %10s %8s %8s %8s %8s %6s\n", "size(B)", "count", "type", "p", "algo",
                "time(us)", "algbw", "busbw", "bound", "%bound", "wrong");
    for (const auto& algo : a.algos) {
      if (algo == "ring") sweep<strata::Ring>(p, a);
      else if (algo == "direct") sweep<strata::Direct>(p, a);
      else if (algo == "auto") sweep<strata::AutoReduce>(p, a);
      else {
        std::fprintf(stderr, "allreduce_bench: unknown algorithm '%s' (ring, direct, auto)\n", algo.c_str());
        return 2;
      }
    }
  }
}
