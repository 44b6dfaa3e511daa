// allreduce_bench --device gpu: all-reduce over virtual GPUs (p replicas on
// GPU 0, DeviceCommunicator's direct reduce kernel), nccl-tests style, with
// a bound from the GPU's measured device-to-device copy bandwidth: the
// direct algorithm reads every replica's buffer once and writes every
// replica's output once, 2 p x size bytes of traffic, so
//   bound time = 2 p size / copy bandwidth (bytes read + written per second).
// %bound = bound time / measured time (= busbw / bound busbw).
#include "allreduce_gpu.hpp"

#include <cstdio>
#include <span>
#include <thread>
#include <vector>

#include <strata/cuda/comm/communicator.hpp>
#include <strata/cuda/launch.hpp>
#if STRATA_HAS_NCCL
#include <strata/cuda/nccl/team.hpp>
#endif

#include "bench_util.hpp"

namespace bench {

namespace {

//! Bytes read + written per second by cudaMemcpyAsync device to device of
//! 256 MiB on GPU `device`, best of 5.
double copy_bandwidth(int device) {
  strata::cuda::DeviceGuard g{device};
  strata::cuda::Stream s{device};
  const std::size_t bytes = std::size_t{256} << 20;
  void *a = nullptr, *b = nullptr;
  strata::cuda::check(cudaMalloc(&a, bytes), "cudaMalloc");
  strata::cuda::check(cudaMalloc(&b, bytes), "cudaMalloc");
  strata::cuda::Event t0{true}, t1{true};
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    t0.record(s.get());
    strata::cuda::check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s.get()), "cudaMemcpyAsync");
    t1.record(s.get());
    const double ms = t1.elapsed_ms(t0);
    if (i > 0) best = std::min(best, ms);  // the first copy warms up
  }
  (void)cudaFree(a);
  (void)cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (best / 1e3);
}

struct Row {
  double seconds = 0;
  long wrong = 0;
};

Row time_all_reduce(strata::DeviceTeam& team, std::size_t bytes, bool in_place) {
  const int p = team.size();
  const std::size_t n = bytes / sizeof(float);
  const int iters = std::max(20, iterations_for(bytes, p));
  std::vector<Row> rows(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  team.reset();
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      strata::cuda::DeviceGuard g{team.devices()[static_cast<std::size_t>(r)]};
      strata::cuda::Stream stream{team.devices()[static_cast<std::size_t>(r)]};
      auto comm = team.communicator(r, stream.get());
      void *in_mem = nullptr, *out_mem = nullptr;
      strata::cuda::check(cudaMalloc(&in_mem, std::max<std::size_t>(bytes, 4)), "cudaMalloc");
      strata::cuda::check(cudaMalloc(&out_mem, std::max<std::size_t>(bytes, 4)), "cudaMalloc");
      float* in = static_cast<float*>(in_mem);
      float* out = static_cast<float*>(out_mem);
      strata::cuda::detail::launch_fill(stream.get(), in, 0.f, n);
      auto once = [&] {
        if (in_place) comm.all_reduce(std::span<float>(in, n), strata::Sum);
        else comm.all_reduce(std::span<const float>(in, n), std::span<float>(out, n), strata::Sum);
      };
      for (int i = 0; i < 5; ++i) once();
      comm.barrier();
      stream.synchronize();
      const double t0 = now_s();
      for (int i = 0; i < iters; ++i) once();
      comm.barrier();
      stream.synchronize();
      const double t = (now_s() - t0) / iters;
      // Correctness: every element must be 1 + 2 + ... + p.
      strata::cuda::detail::launch_fill(stream.get(), in, static_cast<float>(r + 1), n);
      once();
      std::vector<float> got(n);
      if (n)
        strata::cuda::check(cudaMemcpyAsync(got.data(), in_place ? in : out, n * sizeof(float), cudaMemcpyDeviceToHost,
                                            stream.get()),
                            "cudaMemcpyAsync");
      stream.synchronize();
      const float want = static_cast<float>(p * (p + 1) / 2);
      long wrong = 0;
      for (float v : got) wrong += v != want;
      comm.barrier();
      stream.synchronize();
      (void)cudaFree(in);
      (void)cudaFree(out);
      rows[static_cast<std::size_t>(r)] = {t, wrong};
    });
  for (auto& t : threads) t.join();
  Row total = rows[0];
  for (std::size_t r = 1; r < rows.size(); ++r) total.wrong += rows[r].wrong;
  return total;
}

#if STRATA_HAS_NCCL
//! One NCCL rank on GPU 0: the latency and bandwidth floor of an NCCL call
//! (contract, enqueue, polling) with nobody to exchange with.
void nccl_one_rank(std::size_t min_bytes, std::size_t max_bytes) {
  strata::NcclTeam team{{0}};
  strata::cuda::DeviceGuard g{0};
  strata::cuda::Stream stream{0};
  auto comm = team.communicator(0, stream.get());
  std::printf("# NCCL, 1 rank on GPU 0 (NcclCommunicator: host contract, enqueue, polled completion), sum, float\n");
  std::printf("# %8s %12s %10s %8s\n", "size(B)", "count", "time(us)", "algbw");
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::size_t n = bytes / sizeof(float);
    void* mem = nullptr;
    strata::cuda::check(cudaMalloc(&mem, std::max<std::size_t>(bytes, 4)), "cudaMalloc");
    std::span<float> buf(static_cast<float*>(mem), n);
    const int iters = std::max(20, iterations_for(bytes, 1));
    for (int i = 0; i < 5; ++i) comm.all_reduce(buf, strata::Sum);
    comm.synchronize();
    const double t0 = now_s();
    for (int i = 0; i < iters; ++i) comm.all_reduce(buf, strata::Sum);
    comm.synchronize();
    const double t = (now_s() - t0) / iters;
    std::printf("%10zu %12zu %10.1f %8.2f\n", bytes, n, t * 1e6, static_cast<double>(bytes) / t / 1e9);
    std::fflush(stdout);
    (void)cudaFree(mem);
  }
}
#endif

}  // namespace

int gpu_all_reduce(const std::vector<int>& replicas, std::size_t min_bytes, std::size_t max_bytes, bool in_place) {
  if (!strata::cuda::has_gpu()) {
    std::printf("skipped: no GPU (strata::cuda::device_count() == 0)\n");
    return 0;
  }
  const double bw = copy_bandwidth(0);
  std::printf("# strata all-reduce over virtual GPUs on GPU 0 (%s), %s, sum, float\n",
              strata::cuda::device_name(0).c_str(), in_place ? "in place" : "out of place");
  std::printf("# device-to-device copy bandwidth (cudaMemcpyAsync of 256 MiB, bytes read + written): %.1f GB/s\n",
              bw / 1e9);
  std::printf("# bound = busbw if every replica's buffer were read and its output written once at that bandwidth;\n"
              "# %%bound = busbw / bound; time is per call (host enqueue and device work, steady state)\n");
  std::printf("# %8s %12s %6s %3s %-13s %10s %8s %8s %8s %8s %6s\n", "size(B)", "count", "type", "p", "algo",
              "time(us)", "algbw", "busbw", "bound", "%bound", "wrong");
  long wrong = 0;
  for (int p : replicas) {
    strata::DeviceTeam team{strata::virtual_gpus(0, p)};
    for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      const Row row = time_all_reduce(team, bytes, in_place);
      const double algbw = static_cast<double>(bytes) / row.seconds / 1e9;
      const double busbw = algbw * 2.0 * (p - 1) / p;
      const double bound_time = 2.0 * p * static_cast<double>(bytes) / bw;
      const double bound_busbw = static_cast<double>(bytes) / bound_time / 1e9 * 2.0 * (p - 1) / p;
      std::printf("%10zu %12zu %6s %3d %-13s %10.1f %8.2f %8.2f %8.2f %7.0f%% %6ld\n", bytes, bytes / 4, "float", p,
                  "device_direct", row.seconds * 1e6, algbw, busbw, bound_busbw, 100.0 * busbw / bound_busbw,
                  row.wrong);
      std::fflush(stdout);
      wrong += row.wrong;
    }
  }
#if STRATA_HAS_NCCL
  nccl_one_rank(min_bytes, max_bytes);
#else
  std::printf("# NCCL: not in this build (-Dnccl)\n");
#endif
  return wrong == 0 ? 0 : 1;
}

}  // namespace bench
