// Gradient compression across workers (issue 25), under mpirun -np 2: the
// MPI communicator carries bf16 and fp16 (MPI_UINT16_T, summed in FP32 by
// strata's reduction or its MPI operation) with half the bytes of float,
// every algorithm giving the same bits; MultiWorkerMirroredStrategy's
// hierarchical all-reduce compresses its gradients across workers, flat or
// bucketed, bitwise an in-process Mirrored run of as many replicas (one a
// worker), and halves the bytes its leader sends; ZeRO 1 across workers
// reduce-scatters in 16 bits (the compressed all-reduce's bits).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strategy/multi_worker.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "support/quick_workers.hpp"

namespace mpi_compression_test {  // each test file in its own namespace: a unity build joins them

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::bf16;
using strata::fp16;

namespace {

//! The weights after 2 epochs of Adam on blobs under `s`, compressed by `c`, buckets of `bytes`.
template <class S>
std::vector<float> train(S& s, strata::Compression c, std::size_t bytes, bool check_finite = true,
                         strata::ShardedUpdate sharded = strata::ShardedUpdate::Auto) {
  s.executor_options().compression = c;
  s.executor_options().bucket_bytes = bytes;
  s.executor_options().sharded_update = sharded;
  const auto data = strata_test::blobs(160, 11);
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
            {.epochs = 2, .verbose = nn::Verbosity::Silent, .check_finite = check_finite});
  return strata_test::flat_weights(model);
}

//! The same across workers, `local` replicas each (CPUs, or virtual GPUs); `sent`: the bytes this worker's
//! MPI communicator carried (the finiteness check off: no collective a step but the gradient's).
std::vector<float> across_workers(int local, strata::Compression c, std::size_t bytes, std::uint64_t* sent = nullptr,
                                  strata::ShardedUpdate sharded = strata::ShardedUpdate::Auto, bool gpus = false) {
  strata::MultiWorkerMirroredStrategy s{gpus ? strata::virtual_gpus(0, local) : strata::cpu_replicas(local),
                                        strata_test::quick_workers(20s)};
  const std::uint64_t before = s.communicator().payload_bytes();
  auto w = train(s, c, bytes, /*check_finite=*/sent == nullptr, sharded);
  if (sent) *sent = s.communicator().payload_bytes() - before;
  return w;
}

template <class T, class Algo>
std::vector<float> reduced(strata::MpiCommunicator& comm, std::size_t n, Algo algo, std::uint64_t& bytes) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = T(comm.rank() == 0 ? 1.f + static_cast<float>(i % 7) : 3.f / 512 * static_cast<float>(i % 5));
  const auto b0 = comm.payload_bytes();
  comm.all_reduce(v, strata::Sum, algo);
  bytes = comm.payload_bytes() - b0;
  std::vector<float> out;
  for (const T& x : v) out.push_back(static_cast<float>(x));
  return out;
}

}  // namespace

TEST_CASE("the MPI communicator sums bf16 and fp16 in FP32 with every algorithm, half the bytes of float") {
  auto comm = strata::MpiCommunicator::world();
  REQUIRE(comm.size() == 2);
  for (std::size_t n : {std::size_t{100}, std::size_t{100000}}) {  // in the contract's message, and chunked
    CAPTURE(n);
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i)  // two addends: one rounding, whatever the algorithm
      want[i] = static_cast<float>(bf16(static_cast<float>(bf16(1.f + static_cast<float>(i % 7))) +
                                        static_cast<float>(bf16(3.f / 512 * static_cast<float>(i % 5)))));
    std::uint64_t b16 = 0, b32 = 0;
    CHECK(reduced<bf16>(comm, n, strata::Direct{}, b16) == want);
    CHECK(reduced<bf16>(comm, n, strata::Ring{}, b16) == want);
    CHECK(reduced<bf16>(comm, n, strata::Native{}, b16) == want);
    CHECK(reduced<bf16>(comm, n, strata::AutoReduce{}, b16) == want);
    reduced<float>(comm, n, strata::Native{}, b32);
    CHECK(b16 * 2 == b32);
    std::uint64_t h = 0;
    const auto fp = reduced<fp16>(comm, n, strata::Native{}, h);
    CHECK(reduced<fp16>(comm, n, strata::Ring{}, h) == fp);
    CHECK(h == b16);
  }
  std::vector<fp16> big(10, fp16(comm.rank() == 0 ? 40000.f : 30000.f));
  comm.all_reduce(big, strata::Sum, strata::Native{});
  CHECK(big[3].bits == 0x7c00);  // 70000: infinity, for the finiteness check
}

TEST_CASE("compressed gradients cross workers: bitwise an in-process run, flat or bucketed, half the bytes") {
  strata::MirroredStrategy one_process{strata::cpu_replicas(2)};
  const auto want = train(one_process, strata::Compression::BF16, 0);
  const auto fp32 = across_workers(1, strata::Compression::None, 0);
  CHECK(fp32 != want);
  CHECK(across_workers(1, strata::Compression::BF16, 0) == want);  // one replica a worker: one rounding, as in-process
  CHECK(across_workers(1, strata::Compression::BF16, 128) == want);
  const auto two = across_workers(2, strata::Compression::BF16, 0);  // local sum rounded, then across workers
  CHECK(across_workers(2, strata::Compression::BF16, 1) == two);
  CHECK(across_workers(2, strata::Compression::BF16, 0) == two);
  std::uint64_t none = 0, bf = 0, fp = 0;
  across_workers(2, strata::Compression::None, 0, &none);
  across_workers(2, strata::Compression::BF16, 0, &bf);
  across_workers(2, strata::Compression::FP16, 128, &fp);
  const std::size_t params = 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3;  // blobs_mlp
  // the gradients of 2 epochs of 5 steps, and what else crosses workers alike (the start, the epochs' logs)
  const std::uint64_t grads = 2 * 5 * params * 4, other = none - grads;
  REQUIRE(none > grads);
  CHECK(bf - other == grads / 2);
  CHECK(fp - other == grads / 2);
}

// GPU replicas across workers (on the host's compute here): each rounds on its compute, the local sum in
// 16 bits through the device collectives (host-staged here), local replica 0's 16-bit sum across workers
// (the worker sum's 16-bit form: MPI here, NCCL's bf16 on GPUs), the others' copy of it: the CPU replicas'
// compressed bits, and their bytes between the workers.
TEST_CASE("GPU replicas across workers compress as CPU replicas do: the same bits and bytes, flat, bucketed, ZeRO") {
  for (int local : {1, 2}) {
    for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
      INFO(local, " replicas a worker, ", to_string(c));
      std::uint64_t cpu = 0, gpu = 0;
      const auto want = across_workers(local, c, 0, &cpu);
      const auto flat = across_workers(local, c, 0);
      strata_test::HostAsGpu host;
      CHECK(across_workers(local, c, 0, &gpu, strata::ShardedUpdate::Auto, true) == want);
      CHECK(gpu == cpu);
      CHECK(across_workers(local, c, 0, nullptr, strata::ShardedUpdate::Auto, true) == flat);
      CHECK(across_workers(local, c, 128, nullptr, strata::ShardedUpdate::Auto, true) == flat);
      // sharded across workers: each GPU rounds, the 16-bit gradient (ZeRO 1) or each layer's (ZeRO 2, 3)
      // staged through host memory to the replica context's reduce-scatter
      for (strata::ShardedUpdate stage :
           {strata::ShardedUpdate::On, strata::ShardedUpdate::Gradients, strata::ShardedUpdate::Parameters}) {
        INFO("stage ", static_cast<int>(stage));
        CHECK(across_workers(local, c, 0, nullptr, stage, true) == across_workers(local, c, 0, nullptr, stage));
      }
    }
  }
  strata_test::HostAsGpu host;
  CHECK(across_workers(2, strata::Compression::BF16, 0, nullptr, strata::ShardedUpdate::Auto, true) !=
        across_workers(2, strata::Compression::None, 0, nullptr, strata::ShardedUpdate::Auto, true));
}

// ZeRO 1 across workers (ShardedUpdate::On) compressed: each replica's whole gradient rounded with its
// residual, the 16-bit vectors reduce-scattered over every worker's replicas (the local sum rounded, then
// a + b between two workers, as the compressed all-reduce adds them), the updated FP32 slices all-gathered.
TEST_CASE("compressed ZeRO 1 across workers: the compressed all-reduce's bits, half the reduce-scatter's bytes") {
  using strata::ShardedUpdate;
  for (int local : {1, 2}) {
    INFO(local, " replicas a worker");
    const auto flat = across_workers(local, strata::Compression::BF16, 0, nullptr, ShardedUpdate::Off);
    CHECK(across_workers(local, strata::Compression::BF16, 0, nullptr, ShardedUpdate::On) == flat);
    CHECK(across_workers(local, strata::Compression::FP16, 0, nullptr, ShardedUpdate::On) ==
          across_workers(local, strata::Compression::FP16, 0, nullptr, ShardedUpdate::Off));
    CHECK(across_workers(local, strata::Compression::None, 0, nullptr, ShardedUpdate::On) != flat);
    std::uint64_t fp32 = 0, bf = 0;
    across_workers(local, strata::Compression::None, 0, &fp32, ShardedUpdate::On);
    across_workers(local, strata::Compression::BF16, 0, &bf, ShardedUpdate::On);
    const std::size_t params = 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3;  // blobs_mlp
    // the leader's reduce-scatter of the whole gradient, 2 epochs of 5 steps, in half the bytes; its
    // all-gather of the FP32 values and the rest unchanged
    CHECK(fp32 - bf == 2 * 5 * params * 2);
  }
}

// ZeRO 2 and 3 across workers compressed: each layer's gradient rounded with the replica's residual at its
// place as backward ends it, reduce-scattered in 16 bits over every worker's replicas: per element ZeRO 1's
// rounding and sums, so its weights; the gradient's bytes between the workers halved.
TEST_CASE("compressed ZeRO 2 and 3 across workers: compressed ZeRO 1's bits, half the gradient's bytes") {
  using strata::ShardedUpdate;
  const std::size_t params = 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3;  // blobs_mlp
  for (int local : {1, 2}) {
    INFO(local, " replicas a worker");
    const auto one = across_workers(local, strata::Compression::BF16, 0, nullptr, ShardedUpdate::On);
    for (ShardedUpdate stage : {ShardedUpdate::Gradients, ShardedUpdate::Parameters}) {
      CHECK(across_workers(local, strata::Compression::BF16, 0, nullptr, stage) == one);
      std::uint64_t fp32 = 0, bf = 0;
      across_workers(local, strata::Compression::None, 0, &fp32, stage);
      across_workers(local, strata::Compression::BF16, 0, &bf, stage);
      CHECK(fp32 - bf == 2 * 5 * params * 2);  // every layer's reduce-scatter between the workers in 2 bytes
    }
  }
}

}  // namespace mpi_compression_test
