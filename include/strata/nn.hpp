#pragma once
//! strata/nn: layers, losses, optimizers, metrics and the Sequential model,
//! trained under any strategy. Needs a CBLAS (OpenBLAS): link strata_nn_dep.
//!   #include <strata/nn.hpp>
//!   strata::nn::Sequential model{strata::nn::Input{{28, 28}}, strata::nn::Flatten{}, strata::nn::Dense{10}};

#include <strata/nn/adam.hpp>
#include <strata/nn/attention.hpp>
#include <strata/nn/adam_w.hpp>
#include <strata/nn/callbacks.hpp>
#include <strata/nn/conv2d.hpp>
#include <strata/nn/dense.hpp>
#include <strata/nn/dropout.hpp>
#include <strata/nn/embedding.hpp>
#include <strata/nn/flatten.hpp>
#include <strata/nn/gelu.hpp>
#include <strata/nn/layer_norm.hpp>
#include <strata/nn/learning_rate.hpp>
#include <strata/nn/losses.hpp>
#include <strata/nn/max_pool2d.hpp>
#include <strata/nn/metrics.hpp>
#include <strata/nn/position_embedding.hpp>
#include <strata/nn/relu.hpp>
#include <strata/nn/reshape.hpp>
#include <strata/nn/merge.hpp>
#include <strata/nn/model.hpp>
#include <strata/nn/node.hpp>
#include <strata/nn/sequential.hpp>
#include <strata/nn/sgd.hpp>
#include <strata/nn/sigmoid.hpp>
#include <strata/nn/softmax.hpp>
#include <strata/nn/tanh.hpp>
#include <strata/nn/keras_callbacks.hpp>
#include <strata/nn/tensorboard.hpp>
