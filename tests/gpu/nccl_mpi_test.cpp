// NcclCommunicator::world under mpirun -np 2 (suite 'gpu'), one NCCL rank
// per process. Two ranks asking for one GPU are refused on every rank, naming
// both, before NCCL sees them (on a 1-GPU machine that is all this test can
// check, and it is the case that matters there). With a GPU per rank (rank r
// on GPU r): all_reduce, broadcast, reduce_scatter and all_gather against the
// host, a disagreement raised on every rank, and a send / recv round trip.
// Without a GPU every rank exits 77 (skipped) before MPI starts.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/mpi/communicator.hpp>
#include <strata/cuda/nccl/world.hpp>
#include <strata/cuda/device.hpp>
#include <strata/cuda/stream.hpp>

#include "device_vector.hpp"
#include "mpi_gpu_main.hpp"

using namespace std::chrono_literals;

namespace {
using gpu_test::DeviceVector;

strata::MpiCommunicator mpi_world() { return strata::MpiCommunicator::world({.timeout = 60s}); }


template <class T>
std::vector<T> values(int rank, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 5) - 2);
  return v;
}

template <class T>
void check_collectives(strata::NcclCommunicator& c, cudaStream_t s, std::size_t n) {
  const int p = c.size(), me = c.rank();
  const auto up = static_cast<std::size_t>(p);
  std::vector<T> sum(n, T{0}), max = values<T>(0, n);
  for (int r = 0; r < p; ++r) {
    const auto v = values<T>(r, n);
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] += v[i];
      max[i] = std::max(max[i], v[i]);
    }
  }
  {  // all_reduce, out of place and in place
    DeviceVector<T> in(values<T>(me, n), c.device(), s), out(std::vector<T>(n, T{-7}), c.device(), s);
    c.all_reduce(in.span(), out.span(), strata::Sum);
    c.all_reduce(in.span(), strata::Max);
    c.synchronize();
    CHECK(out.read() == sum);
    CHECK(in.read() == max);
  }
  if constexpr (std::floating_point<T>) {
    DeviceVector<T> in(values<T>(me, n), c.device(), s);
    c.all_reduce(in.span(), strata::Mean);
    c.synchronize();
    const auto got = in.read();
    for (std::size_t i = 0; i < n; ++i)
      if (std::abs(static_cast<double>(got[i]) - static_cast<double>(sum[i]) / p) > 1e-5) {
        FAIL_CHECK("mean: element " << i << " is " << got[i] << ", expected " << static_cast<double>(sum[i]) / p);
        break;
      }
  }
  {  // broadcast from the last rank
    DeviceVector<T> d(me == p - 1 ? values<T>(9, n) : std::vector<T>(n, T{-7}), c.device(), s);
    c.broadcast(d.span(), p - 1);
    c.synchronize();
    CHECK(d.read() == values<T>(9, n));
  }
  {  // reduce_scatter: shards of n (uneven unless p divides it)
    const strata::Range mine = strata::shard_range(n, up, static_cast<std::size_t>(me));
    DeviceVector<T> in(values<T>(me, n), c.device(), s), out(std::vector<T>(mine.size(), T{-7}), c.device(), s);
    c.reduce_scatter(in.span(), out.span(), strata::Sum);
    c.synchronize();
    CHECK(out.read() == std::vector<T>(sum.begin() + static_cast<std::ptrdiff_t>(mine.begin),
                                       sum.begin() + static_cast<std::ptrdiff_t>(mine.end)));
  }
  for (bool uneven : {false, true}) {  // all_gather: rank r gives n (+ r when uneven) elements
    std::vector<T> want;
    for (int r = 0; r < p; ++r) {
      const auto v = values<T>(r, n + (uneven ? static_cast<std::size_t>(r) : 0));
      want.insert(want.end(), v.begin(), v.end());
    }
    DeviceVector<T> in(values<T>(me, n + (uneven ? static_cast<std::size_t>(me) : 0)), c.device(), s);
    DeviceVector<T> out(std::vector<T>(want.size(), T{-7}), c.device(), s);
    c.all_gather(in.span(), out.span());
    c.synchronize();
    CHECK_MESSAGE(out.read() == want, (uneven ? "uneven" : "even") << " all_gather");
  }
}

}  // namespace

TEST_CASE("two ranks on one GPU: NcclCommunicator::world refuses on every rank, naming both") {
  auto mpi = mpi_world();
  REQUIRE(mpi.size() == 2);
  strata::cuda::Stream s{0};
  // On a 1-GPU machine this is what two ranks get; elsewhere both ask for GPU 0.
  CHECK_THROWS_WITH_AS(strata::NcclCommunicator::world(mpi, 0, s.get()),
                       doctest::Contains("ranks 0 and 1 both use GPU 0"), strata::Error);
  mpi.barrier();  // every rank got here: nobody waits in NCCL
}

TEST_CASE("collectives across processes match the host (a GPU per rank) (two GPUs)") {
  auto mpi = mpi_world();
  const int gpus = strata::cuda::device_count();
  STRATA_GPU_SKIP_UNLESS(gpus >= mpi.size(), std::to_string(mpi.size()) + " ranks need " +
                                                 std::to_string(mpi.size()) + " GPUs; this machine has " +
                                                 std::to_string(gpus) + " (the duplicate-GPU case runs in gpu_nccl_mpi_np2)");
  const int device = mpi.rank();
  strata::cuda::DeviceGuard g{device};
  strata::cuda::Stream s{device};
  auto c = strata::NcclCommunicator::world(mpi, device, s.get(), {.timeout = 60s});
  CHECK(c.rank() == mpi.rank());
  CHECK(c.size() == mpi.size());
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1001}, (std::size_t{1} << 20) + 3}) {
    CAPTURE(n);
    check_collectives<float>(c, s.get(), n);
    check_collectives<std::int64_t>(c, s.get(), n);
  }
  // A disagreement: every rank raises it, and the communicator stays usable.
  {
    DeviceVector<float> a(values<float>(c.rank(), 10 + static_cast<std::size_t>(c.rank())), device, s.get());
    CHECK_THROWS_WITH_AS(c.all_reduce(a.span(), strata::Sum), doctest::Contains("element counts differ"),
                         strata::CollectiveMismatch);
    c.barrier();
    c.synchronize();
    CHECK(c.failure().empty());
  }
  // A round trip between ranks 0 and 1.
  if (c.rank() < 2) {
    const int peer = 1 - c.rank();
    DeviceVector<double> d(c.rank() == 0 ? values<double>(4, 777) : std::vector<double>(777, -7.0), device, s.get());
    if (c.rank() == 0) {
      c.send(d.span(), peer, 5);
      c.recv(d.span(), peer, 6);
    } else {
      c.recv(d.span(), peer, 5);
      c.send(d.span(), peer, 6);
    }
    c.synchronize();
    CHECK(d.read() == values<double>(4, 777));
  }
  c.barrier();
  c.synchronize();
}

int main(int argc, char** argv) { return gpu_test::mpi_main(argc, argv, "NCCL MPI tests"); }
