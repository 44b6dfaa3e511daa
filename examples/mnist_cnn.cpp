// MNIST with a small convnet: two Conv2D(3x3, relu) + MaxPool2D(2) blocks and
// a dense head, Adam(1e-3), sparse categorical cross-entropy from logits.
//   ./build/examples/mnist_cnn --strategy mirrored --replicas 2 --epochs 3
//   mpirun -np 2 ./build/examples/mnist_cnn --strategy pipeline --microbatches 4   # a stage per rank
// Exits 0 when test accuracy reaches 99.0%.
#include <strata/config.hpp>
#if STRATA_HAS_MPI  // examples/meson.build links the MNIST examples with strata-mpi whenever the backend is built
#include <strata/strategy/by_name_mpi.hpp>  // the strategies across the ranks of an mpirun job
#endif
#include <strata/nn/conv2d.hpp>
#include <strata/nn/max_pool2d.hpp>

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
        return nn::Sequential{nn::Input{{28, 28}}, nn::Reshape{{28, 28, 1}},
                              nn::Conv2D{32, 3}, nn::ReLU{}, nn::MaxPool2D{2},
                              nn::Conv2D{64, 3}, nn::ReLU{}, nn::MaxPool2D{2},
                              nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
      },
      0.99);
}
