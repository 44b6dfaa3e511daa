// NcclCommunicator's non-blocking forms and its bounded host waits, in one
// process over every GPU (one replica thread and stream per GPU): the Works
// give the blocking results; and where a peer's GPU never joins (its stream
// held by a host function), every host wait behind the NCCL work (the
// Work's wait, Stream::synchronize, a staging download) ends within the
// timeout with CollectiveTimeout naming the operation, and aborts the NCCL
// communicator, instead of waiting forever. Buffers from the stream-ordered
// pool (device_vector.hpp), as CudaCompute's replicas have.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/cuda/nccl/team.hpp>
#include <strata/cuda/staging.hpp>
#include <strata/cuda/stream.hpp>

#include "device_vector.hpp"
#include "skip.hpp"

namespace nccl_async_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

using namespace std::chrono_literals;

namespace {
using gpu_test::DeviceVector;

std::vector<int> every_gpu() {
  std::vector<int> d(static_cast<std::size_t>(strata::cuda::device_count()));
  std::iota(d.begin(), d.end(), 0);
  return d;
}

//! One thread per rank with its GPU current, its own Stream and
//! communicator: f(comm, rank, stream). Rethrows the first rank's exception.
void each_rank(strata::NcclTeam& team,
               const std::function<void(strata::NcclCommunicator&, int, strata::cuda::Stream&)>& f) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(team.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < team.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        strata::cuda::DeviceGuard g{team.device(r)};
        strata::cuda::Stream s{team.device(r)};
        auto comm = team.communicator(r, s.get());
        f(comm, r, s);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::vector<float> values(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 5) - 2);
  return v;
}

//! A host function that holds its stream until `release` is set.
void CUDART_CB hold(void* release) {
  auto* flag = static_cast<std::atomic<bool>*>(release);
  while (!flag->load()) std::this_thread::sleep_for(1ms);
}

}  // namespace

TEST_CASE("the async forms give the blocking results on every GPU, and their Works complete") {
  static_assert(strata::AsyncCommunicator<strata::NcclCommunicator>);
  const auto gpus = every_gpu();
  const int p = static_cast<int>(gpus.size());
  const auto up = gpus.size();
  const std::size_t n = 4 * up + 1;  // uneven shards
  strata::NcclTeam team{gpus, {.timeout = 30s}};
  std::vector<float> sum(n, 0.f);
  for (int r = 0; r < p; ++r) {
    const auto v = values(r, n);
    for (std::size_t i = 0; i < n; ++i) sum[i] += v[i];  // small integers: exact in any order
  }
  std::vector<std::vector<float>> reduced(up), gathered(up), bcast(up);
  each_rank(team, [&](strata::NcclCommunicator& c, int r, strata::cuda::Stream& s) {
    const auto ur = static_cast<std::size_t>(r);
    DeviceVector<float> a(values(r, n), c.device(), s.get()), b(values(r, n), c.device(), s.get());
    DeviceVector<float> shard(std::vector<float>(strata::shard_range(n, up, ur).size()), c.device(), s.get());
    DeviceVector<float> all(std::vector<float>(n), c.device(), s.get());
    DeviceVector<float> root(values(r, n), c.device(), s.get());
    strata::Work w1 = c.all_reduce_async(a.span(), strata::Sum);
    strata::Work w2 = c.reduce_scatter_async(std::span<const float>(b.span()), shard.span(), strata::Sum);
    w2.wait();
    strata::Work w3 = c.all_gather_async(std::span<const float>(shard.span()), all.span());
    strata::Work w4 = c.broadcast_async(root.span(), p - 1);
    strata::Work w5 = c.barrier_async();
    while (!w5.test()) std::this_thread::yield();  // bounded: test() raises the typed error instead of hanging
    CHECK(w4.is_completed());  // earlier on the same stream
    w1.wait();
    w3.wait();
    CHECK(c.all_reduce_async(std::span<float>(), strata::Sum).is_completed());  // nothing enqueued
    reduced[ur] = a.read();
    gathered[ur] = all.read();
    bcast[ur] = root.read();
  });
  for (std::size_t r = 0; r < up; ++r) {
    CHECK(reduced[r] == sum);
    CHECK(gathered[r] == sum);
    CHECK(bcast[r] == values(p - 1, n));
  }
}

namespace {

//! Rank 1's stream is held before its part of an all_reduce; rank 0 then
//! waits behind its own part through `wait` (given its communicator, its
//! stream and its buffer), which must end with CollectiveTimeout within the
//! timeout, abort the communicator and name the all_reduce.
void check_bounded(const char* how,
                   const std::function<void(strata::NcclCommunicator&, strata::cuda::Stream&, DeviceVector<float>&)>& wait) {
  CAPTURE(how);
  const auto timeout = 4s;
  strata::NcclTeam team{{0, 1}, {.timeout = timeout}};
  std::atomic<bool> release{false}, rank0_done{false};
  std::string error;
  bool timed_out = false;
  std::chrono::steady_clock::duration took{};
  std::string rank1_error;
  each_rank(team, [&](strata::NcclCommunicator& c, int r, strata::cuda::Stream& s) {
    DeviceVector<float> a(values(r, 1000), c.device(), s.get());
    struct Release {  // whatever happens, rank 1's stream is released before its buffer goes
      std::atomic<bool>& flag;
      ~Release() { flag = true; }
    };
    if (r == 1) {
      Release guard{release};
      STRATA_CUDA_CHECK(cudaLaunchHostFunc(s.get(), hold, &release));
      c.all_reduce(a.span(), strata::Sum);  // agreed and enqueued, behind the held host function
      while (!rank0_done.load()) std::this_thread::sleep_for(1ms);
      release = true;
      try {
        c.synchronize();  // rank 0 failed: CollectiveAborted (this rank aborts too, so its kernel ends)
      } catch (const strata::CollectiveAborted& e) {
        rank1_error = e.what();
      }
      return;
    }
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag = true; }
    } done{rank0_done};
    const auto t0 = std::chrono::steady_clock::now();
    try {
      wait(c, s, a);
    } catch (const strata::CollectiveTimeout& e) {
      timed_out = true;
      error = e.what();
    }
    took = std::chrono::steady_clock::now() - t0;
    CHECK_FALSE(c.failure().empty());  // aborted: its kernel ended, so its buffer may go
  });
  CHECK(timed_out);
  CHECK(error.find("timed out after 4000 ms") != std::string::npos);
  CHECK(error.find("all_reduce") != std::string::npos);
  CHECK(error.find("communicator is aborted") != std::string::npos);
  CHECK(took >= timeout);
  CHECK(took < timeout + 10s);
  CHECK(team.aborted());
  CHECK(rank1_error.find("abandoned") != std::string::npos);
}

}  // namespace

TEST_CASE("a host wait behind NCCL work whose peer never joins on its GPU is a bounded CollectiveTimeout (two GPUs)") {
  STRATA_GPU_SKIP_UNLESS(every_gpu().size() >= 2, "an NCCL peer whose GPU never joins needs 2 GPUs; this machine has " +
                                                      std::to_string(every_gpu().size()));
  check_bounded("Work::wait", [](strata::NcclCommunicator& c, strata::cuda::Stream&, DeviceVector<float>& a) {
    strata::Work w = c.all_reduce_async(a.span(), strata::Sum);
    CHECK_FALSE(w.test());  // held on the peer's GPU
    w.wait();
  });
  check_bounded("Stream::synchronize", [](strata::NcclCommunicator& c, strata::cuda::Stream& s, DeviceVector<float>& a) {
    c.all_reduce(a.span(), strata::Sum);
    s.synchronize();
  });
  check_bounded("a staging download", [](strata::NcclCommunicator& c, strata::cuda::Stream& s, DeviceVector<float>& a) {
    c.all_reduce(a.span(), strata::Sum);
    std::vector<float> host(1000);
    strata::cuda::detail::Stager stager;
    stager.download(s.get(), host.data(), a.get(), host.size() * sizeof(float));
  });
}

}  // namespace nccl_async_gpu_test
