// The MNIST examples' training run, compiled once for mnist_mlp and mnist_cnn
// (examples/mnist_main.hpp declares what they call).
#include "mnist_common.hpp"
