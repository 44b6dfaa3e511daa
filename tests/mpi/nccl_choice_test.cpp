// NCCL across workers in a program that has it (<strata/nccl_mpi.hpp>),
// without a GPU (CI): the registered WorkerSum maker gathers every worker's
// GPU and STRATA_WORKER_ALLREDUCE over MPI and decides the same on every
// worker. GPU replicas computing on the host (tests/device/host_as_gpu.hpp) cannot
// take NCCL: they get the host-staged sum, say why, and train bitwise like
// CPU workers; forcing NCCL there, or workers that disagree on the variable,
// is an Error on every worker, not a hang. Run under mpirun -np 2.
#include <doctest/doctest.h>

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nccl_mpi.hpp>
#include <strata/nn.hpp>
#include <strata/strategy/multi_worker.hpp>

#include "support/blobs.hpp"
#include "support/quick_workers.hpp"
#include "device/host_as_gpu.hpp"

using namespace std::chrono_literals;
namespace nn = strata::nn;

namespace {
strata::MultiWorkerOptions quick() { return strata_test::quick_workers(20s); }
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
//! Trains a small MLP for 2 epochs; its weights and how the gradients were summed.
template <class S>
std::tuple<std::vector<float>, std::string> train(S& s) {
  const auto data = strata_test::blobs(203, 11);
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dense{3}};
  });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 5});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(24)),
            {.epochs = 2, .verbose = nn::Verbosity::Silent});
  return {strata_test::flat_weights(model), model.gradient_reduction()};
}
}  // namespace

TEST_CASE("with NCCL in the program, GPU replicas off the GPU sum across workers through host memory, saying why") {
  strata::MultiWorkerMirroredStrategy cpus{strata::cpu_replicas(2), quick()};
  const auto [want, none] = train(cpus);
  strata_test::HostAsGpu host;
  strata::MultiWorkerMirroredStrategy gpus{strata::virtual_gpus(0, 2), quick()};
  const auto [got, how] = train(gpus);
  CHECK(got == want);
  INFO(how);
  CHECK(how.find("; across workers: local replica 0 of some worker does not compute on a GPU: each worker's sum is "
                 "staged through host memory and all-reduced over MPI") != std::string::npos);
}

TEST_CASE("forcing NCCL across workers that cannot take it, or disagreeing on it, is an error on every worker") {
  strata_test::HostAsGpu host;
  setenv("STRATA_WORKER_ALLREDUCE", "nccl", 1);
  {
    strata::MultiWorkerMirroredStrategy s{strata::virtual_gpus(0, 1), quick()};
    CHECK_THROWS_WITH_AS(train(s), doctest::Contains("cannot force nccl across workers: local replica 0 of some "
                                                     "worker does not compute on a GPU"),
                         strata::Error);
  }
  if (world_rank() == 0) setenv("STRATA_WORKER_ALLREDUCE", "host_staged", 1);
  {
    strata::MultiWorkerMirroredStrategy s{strata::virtual_gpus(0, 1), quick()};
    CHECK_THROWS_WITH_AS(train(s), doctest::Contains("the workers disagree on STRATA_WORKER_ALLREDUCE"),
                         strata::Error);
  }
  unsetenv("STRATA_WORKER_ALLREDUCE");
  // and afterwards the job goes on: a fresh strategy trains
  strata::MultiWorkerMirroredStrategy s{strata::virtual_gpus(0, 1), quick()};
  CHECK(std::get<1>(train(s)).find("across workers: local replica 0") != std::string::npos);
}
