// MultiWorkerMirroredStrategy with GPU replicas under mpirun -np 2 (suite
// 'gpu'), with NCCL across workers in the program (<strata/nccl_mpi.hpp>).
// Each worker's replicas sum on their GPU, local replica 0 sums that across
// workers (NCCL where the workers have distinct GPUs, else host memory over
// MPI), the others take its result. Two workers with 2 replicas each take the
// steps of one process with 4 virtual GPUs on the same global batches (FP32
// reduction-order tolerance); the choice names what ran and why; forcing NCCL
// on workers that share a GPU is an error on every worker, not a hang.
// Without a GPU every rank exits 77 (skipped) before MPI starts.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nccl_mpi.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/multi_worker.hpp>

#include "support/blobs.hpp"
#include "support/quick_workers.hpp"
#include "gpu_util.hpp"
#include "mpi_gpu_main.hpp"

using namespace std::chrono_literals;
namespace nn = strata::nn;

namespace {

strata::MultiWorkerOptions quick() { return strata_test::quick_workers(60s); }

struct Run {
  std::vector<float> w;
  double accuracy = 0;
  std::string how;
};

template <class S>
Run train(S& s, const strata_test::Blobs& data) {
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{32, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                          nn::Dense{3}};
  });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 3});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(64)),
            {.epochs = 2, .verbose = nn::Verbosity::Silent});
  Run r;
  r.w = strata_test::flat_weights(model);
  r.how = model.gradient_reduction();
  r.accuracy = model.evaluate(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(100)),
                              {.verbose = nn::Verbosity::Silent})
                   .at("accuracy");
  return r;
}

//! This worker's GPU: its own where the machine has one per worker, else GPU 0 for all.
int my_gpu(const strata::MpiCommunicator& comm) { return comm.rank_on_node() % strata::cuda::device_count(); }

//! Whether every worker has a GPU of its own (then NCCL runs across them).
bool distinct_gpus(const strata::MpiCommunicator& comm) {
  return strata::cuda::device_count() >= comm.ranks_on_node();
}

}  // namespace

TEST_CASE("2 workers x 2 GPU replicas take the steps of 4 virtual GPUs in one process, and say how they summed") {
  const auto data = strata_test::blobs(1003, 5);
  strata::MirroredStrategy one{strata::virtual_gpus(0, 4)};
  const Run want = train(one, data);
  CHECK(want.accuracy > 0.9);

  strata::MultiWorkerMirroredStrategy probe{{strata::gpu(0)}, quick()};
  const int g = my_gpu(probe.communicator());
  const bool own = distinct_gpus(probe.communicator());
  strata::MultiWorkerMirroredStrategy s{strata::virtual_gpus(g, 2), quick()};
  const Run got = train(s, data);
  gpu_test::check_close(got.w, want.w, 1e-3, 2e-4, "weights against 4 virtual GPUs in one process");
  CHECK(got.accuracy == doctest::Approx(want.accuracy).epsilon(0.01));
  INFO(got.how);
  CHECK(got.how.find("2 replicas share GPU " + std::to_string(g) + " (virtual GPUs)") == 0);
  if (own)
    CHECK(got.how.find("; across workers: 2 workers, each on its own GPU: NCCL across workers") != std::string::npos);
  else
    CHECK(got.how.find("; across workers: 2 workers share GPUs (ranks 0 and 1 both use GPU 0") != std::string::npos);
  // and again: the same bits (the reduction orders are fixed)
  const Run again = train(s, data);
  gpu_test::check_bitwise(again.w, got.w, "a second run on the same workers");
}

TEST_CASE("forcing the sum across workers: host memory always can; NCCL on a shared GPU is an error on every worker") {
  const auto data = strata_test::blobs(256, 8);
  strata::MultiWorkerMirroredStrategy probe{{strata::gpu(0)}, quick()};
  const int g = my_gpu(probe.communicator());
  {
    setenv("STRATA_WORKER_ALLREDUCE", "host_staged", 1);
    strata::MultiWorkerMirroredStrategy s{{strata::gpu(g)}, quick()};
    const Run got = train(s, data);
    unsetenv("STRATA_WORKER_ALLREDUCE");
    CHECK(got.how.find("; across workers: forced: host_staged (automatic: ") != std::string::npos);
    CHECK(got.accuracy > 0.8);
  }
  if (!distinct_gpus(probe.communicator())) {
    setenv("STRATA_WORKER_ALLREDUCE", "nccl", 1);
    strata::MultiWorkerMirroredStrategy s{{strata::gpu(g)}, quick()};
    CHECK_THROWS_WITH_AS(train(s, data),
                         doctest::Contains("cannot force nccl across workers: ranks 0 and 1 both use GPU 0"),
                         strata::Error);
    unsetenv("STRATA_WORKER_ALLREDUCE");
  }
}

int main(int argc, char** argv) { return gpu_test::mpi_main(argc, argv, "GPU multi-worker tests"); }
