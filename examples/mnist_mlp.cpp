// MNIST with a multilayer perceptron: Flatten -> Dense(128, relu) -> Dense(10),
// Adam(1e-3), sparse categorical cross-entropy from logits, batch 128.
//   bash scripts/fetch-mnist.sh && ./build/examples/mnist_mlp --strategy mirrored --replicas 2
// Exits 0 when test accuracy reaches 97.5% (the bar after 5 epochs).

#include "mnist_main.hpp"

int main(int argc, char** argv) {
  namespace nn = strata::nn;
  return example::mnist_main(
      argc, argv,
      [] {
        return nn::Sequential{nn::Input{{28, 28}}, nn::Flatten{},
                              nn::Dense{128, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
      },
      0.975);
}
