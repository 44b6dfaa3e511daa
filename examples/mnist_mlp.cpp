// MNIST with a multilayer perceptron: Flatten -> Dense(128, relu) -> Dense(10),
// Adam(1e-3), sparse categorical cross-entropy from logits, batch 128.
//   bash scripts/fetch-mnist.sh && ./build/examples/mnist_mlp --strategy mirrored --replicas 2
// Exits 0 when test accuracy reaches 97.5% (the bar after 5 epochs).
#include <strata/config.hpp>
#if STRATA_HAS_MPI  // examples/meson.build links mnist_mlp with strata-mpi whenever the backend is built
#include <strata/strategy/by_name_mpi.hpp>  // --strategy multi_worker_mirrored, parameter_server under mpirun
#endif

#include "mnist_common.hpp"

#if STRATA_HAS_MPI
using Strategies = strata::MpiStrategies;
#else
using Strategies = strata::InProcessStrategies;
#endif

int main(int argc, char** argv) {
  namespace nn = strata::nn;
  return example::mnist_main<Strategies>(
      argc, argv,
      [] {
        return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{},
                              nn::Dense{128, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
      },
      0.975);
}
