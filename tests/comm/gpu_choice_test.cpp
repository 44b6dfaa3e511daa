// Where GPU replicas reduce (comm/gpu_choice.hpp) and the duplicate-GPU
// check NCCL needs: plain C++, decided and worded without a GPU.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include <strata/comm/gpu_choice.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/device/device_compute.hpp>

namespace gpu_choice_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using strata::GpuIdentity;
using strata::GpuReduce;

namespace {
const auto all_peers = [](int, int) { return true; };
const auto no_peers = [](int, int) { return false; };
}  // namespace

TEST_CASE("choose_gpu_reduce: virtual GPUs on one device reduce with the direct kernel, never NCCL") {
  const std::vector<int> four{0, 0, 0, 0};
  const auto c = strata::choose_gpu_reduce(four, /*nccl=*/true, no_peers);
  CHECK(c.kind == GpuReduce::device_direct);
  CHECK(c.why == "4 replicas share GPU 0 (virtual GPUs): a direct reduce kernel over their buffers in its memory "
                 "(NCCL cannot have two ranks on one GPU)");
  const std::vector<int> one{3};
  CHECK(strata::choose_gpu_reduce(one, true, no_peers).why ==
        "1 replica on GPU 3: nothing to exchange (a copy on the device)");
}

TEST_CASE("choose_gpu_reduce: distinct GPUs use NCCL when the program has it, else peer memory, else the host") {
  const std::vector<int> two{0, 1};
  auto c = strata::choose_gpu_reduce(two, true, no_peers);
  CHECK(c.kind == GpuReduce::nccl);
  CHECK(c.why == "2 replicas on 2 distinct GPUs (0, 1): NCCL, one communicator rank per GPU");
  c = strata::choose_gpu_reduce(two, false, all_peers);
  CHECK(c.kind == GpuReduce::device_direct);
  CHECK(c.why.find("NCCL is not in this program; every pair of GPUs reaches the other's memory") != std::string::npos);
  c = strata::choose_gpu_reduce(two, false, no_peers);
  CHECK(c.kind == GpuReduce::host_staged);
  CHECK(c.why == "2 replicas on GPUs 0, 1: GPUs 0 and 1 cannot access each other's memory and NCCL is not in this "
                 "program: staged through host memory");
}

TEST_CASE("choose_gpu_reduce: GPUs shared by some replicas need peer access, NCCL cannot take them") {
  const std::vector<int> mixed{0, 0, 1, 1};
  auto c = strata::choose_gpu_reduce(mixed, true, all_peers);
  CHECK(c.kind == GpuReduce::device_direct);
  CHECK(c.why.find("4 replicas on GPUs 0 x2, 1 x2: NCCL needs one rank per GPU") == 0);
  // Peer access must hold both ways.
  c = strata::choose_gpu_reduce(mixed, true, [](int a, int) { return a == 0; });
  CHECK(c.kind == GpuReduce::host_staged);
}

TEST_CASE("choose_gpu_reduce: forcing an algorithm says so, and an impossible force is an error naming why") {
  const std::vector<int> two{0, 1};
  auto c = strata::choose_gpu_reduce(two, true, all_peers, "device_direct");
  CHECK(c.kind == GpuReduce::device_direct);
  CHECK(c.why.find("forced: device_direct (automatic: 2 replicas on 2 distinct GPUs") == 0);
  CHECK(strata::choose_gpu_reduce(two, true, all_peers, "nccl").kind == GpuReduce::nccl);  // the automatic choice
  CHECK(strata::choose_gpu_reduce(two, true, no_peers, "host_staged").kind == GpuReduce::host_staged);
  const std::vector<int> same{0, 0};
  CHECK_THROWS_WITH_AS(strata::choose_gpu_reduce(same, true, all_peers, "nccl"),
                       "choose_gpu_reduce: cannot force nccl for 2 replicas on GPUs 0 x2: NCCL needs one rank per "
                       "GPU and some replicas share a GPU",
                       strata::Error);
  CHECK_THROWS_WITH_AS(strata::choose_gpu_reduce(two, false, all_peers, "nccl"),
                       doctest::Contains("NCCL is not in this program"), strata::Error);
  CHECK_THROWS_WITH_AS(strata::choose_gpu_reduce(two, true, no_peers, "device_direct"),
                       doctest::Contains("GPUs 0 and 1 cannot access each other's memory"), strata::Error);
  CHECK_THROWS_WITH_AS(strata::choose_gpu_reduce(two, true, all_peers, "ring"),
                       doctest::Contains("unknown algorithm 'ring'; use nccl, device_direct or host_staged"),
                       strata::Error);
  CHECK_THROWS_AS(strata::choose_gpu_reduce(std::vector<int>{}, true, all_peers), strata::Error);
}

TEST_CASE("duplicate_gpus: two ranks on one GPU are named, with the host and the UUID; distinct ones pass") {
  std::vector<GpuIdentity> ok{{"a", 0, "GPU-1"}, {"a", 1, "GPU-2"}, {"b", 0, "GPU-3"}};
  CHECK(strata::duplicate_gpus(ok).empty());
  CHECK_NOTHROW(strata::check_distinct_gpus(ok, "test"));

  std::vector<GpuIdentity> dup{{"node7", 0, "GPU-5e1c"}, {"node7", 0, "GPU-5e1c"}, {"node8", 0, "GPU-77"}};
  CHECK(strata::duplicate_gpus(dup) == "ranks 0 and 1 both use GPU 0 (GPU-5e1c) on node7");
  CHECK_THROWS_WITH_AS(strata::check_distinct_gpus(dup, "NcclCommunicator::world"),
                       doctest::Contains("NcclCommunicator::world: ranks 0 and 1 both use GPU 0 (GPU-5e1c) on node7. "
                                         "NCCL needs one GPU per rank"),
                       strata::Error);

  // CUDA_VISIBLE_DEVICES renumbers: the same UUID under different indices is the same GPU...
  std::vector<GpuIdentity> renumbered{{"h", 0, "GPU-9"}, {"h", 1, "GPU-9"}};
  CHECK(strata::duplicate_gpus(renumbered) == "ranks 0 and 1 both use GPU 0 (GPU-9) on h");
  // ...and without UUIDs the index decides; three ranks on one GPU are listed together.
  std::vector<GpuIdentity> three{{"", 2, ""}, {"", 1, ""}, {"", 2, ""}, {"", 2, ""}};
  CHECK(strata::duplicate_gpus(three) == "ranks 0, 2 and 3 all use GPU 2 on this host");
  // The same index on different hosts is fine.
  std::vector<GpuIdentity> hosts{{"a", 0, ""}, {"b", 0, ""}};
  CHECK(strata::duplicate_gpus(hosts).empty());
}

TEST_CASE("choose_worker_reduce: NCCL across workers on distinct GPUs, host memory when they share one or lack it") {
  std::vector<GpuIdentity> own{{"a", 0, "GPU-1"}, {"b", 0, "GPU-2"}, {"b", 1, "GPU-3"}};
  auto c = strata::choose_worker_reduce(own, /*nccl_available=*/true);
  CHECK(c.kind == GpuReduce::nccl);
  CHECK(c.why == "3 workers, each on its own GPU: NCCL across workers (one rank per worker, on the GPU of its local "
                 "replica 0), after the sum of its local replicas on their devices");

  // Two processes on one GPU (the one-GPU machine): NCCL would refuse them; staged through host memory.
  std::vector<GpuIdentity> shared{{"h", 0, "GPU-9"}, {"h", 0, "GPU-9"}};
  c = strata::choose_worker_reduce(shared, true);
  CHECK(c.kind == GpuReduce::host_staged);
  CHECK(c.why == "2 workers share GPUs (ranks 0 and 1 both use GPU 0 (GPU-9) on h, counting workers as ranks) and "
                 "NCCL needs one GPU per rank: each worker's sum is staged through host memory and all-reduced over "
                 "MPI");

  // Without <strata/nccl_mpi.hpp> nothing is gathered: host memory, and the header that changes it.
  c = strata::choose_worker_reduce({}, false);
  CHECK(c.kind == GpuReduce::host_staged);
  CHECK(c.why.find("include <strata/nccl_mpi.hpp>") != std::string::npos);

  // Forcing: host memory always can; NCCL cannot on a shared GPU or without NCCL, and says why.
  c = strata::choose_worker_reduce(own, true, "host_staged");
  CHECK(c.kind == GpuReduce::host_staged);
  CHECK(c.why.starts_with("forced: host_staged (automatic: 3 workers, each on its own GPU"));
  CHECK(strata::choose_worker_reduce(own, true, "nccl").kind == GpuReduce::nccl);
  CHECK_THROWS_WITH_AS(strata::choose_worker_reduce(shared, true, "nccl"),
                       doctest::Contains("cannot force nccl across workers: ranks 0 and 1 both use GPU 0 (GPU-9) on "
                                         "h. NCCL needs one GPU per rank"),
                       strata::Error);
  CHECK_THROWS_WITH_AS(strata::choose_worker_reduce({}, false, "nccl"),
                       doctest::Contains("NCCL across workers is not in this program"), strata::Error);
  CHECK_THROWS_WITH_AS(strata::choose_worker_reduce(own, true, "ring"),
                       doctest::Contains("unknown algorithm 'ring' across workers; use nccl or host_staged"),
                       strata::Error);
}

}  // namespace gpu_choice_test

namespace gpu_choice_test {
//! A device's memory whose queued work never ends (behind a collective waiting for a dead peer).
struct NeverEnds final : strata::kernels::HostMemoryOps<strata::kernels::Memory> {
  int bounded_calls = 0;
  std::chrono::milliseconds asked{0};
  void synchronize() override { FAIL("a failure path waited without a deadline (Memory::synchronize)"); }
  bool synchronize_within(std::chrono::milliseconds timeout) override {
    ++bounded_calls;
    asked = timeout;
    return false;
  }
  [[nodiscard]] std::string name() const override { return "a GPU whose work never ends"; }
};
}  // namespace gpu_choice_test

TEST_CASE("after a failed step a replica's device is waited for with a deadline, never without one") {
  gpu_choice_test::NeverEnds never;
  strata::detail::ReplicaDevice R;
  R.m = &never;
  CHECK_FALSE(R.quiesce(std::chrono::milliseconds(5)));  // pending: it says so and goes on
  CHECK(never.bounded_calls == 1);
  CHECK(never.asked == std::chrono::milliseconds(5));
  CHECK_FALSE(R.quiesce());
  CHECK(never.asked == strata::detail::ReplicaDevice::quiesce_timeout);
  strata::detail::ReplicaDevice host;  // a CPU replica's: nothing queued
  CHECK(host.quiesce());
}
