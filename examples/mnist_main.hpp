// The MNIST examples' main(), declared: mnist_mlp and mnist_cnn give their
// model; the training run under whichever strategy the command line names
// (examples/mnist_common.hpp) is compiled once, in examples/mnist_common.cpp,
// for both.
#pragma once

#include <functional>

#include <strata/nn.hpp>

namespace example {

//! main() of an MNIST example: parse, load, train `make_model`'s model
//! under the named strategy; exits 0 when the test accuracy reaches
//! `target` (--min-accuracy overrides it), the learning rate times
//! `lr_decay` after each epoch (--lr-decay overrides it).
int mnist_main(int argc, char** argv, const std::function<strata::nn::Sequential()>& make_model, double target,
               double lr_decay = 1);

}  // namespace example
