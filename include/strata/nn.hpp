#pragma once
//! strata/nn: layers, losses, optimizers, metrics and the Sequential model,
//! trained under any strategy. Needs a CBLAS (OpenBLAS): link strata_nn_dep.
//!   #include <strata/nn.hpp>
//!   strata::nn::Sequential model{strata::nn::Input{{28, 28}}, strata::nn::Flatten{}, strata::nn::Dense{10}};

#include <strata/nn/optimizers/adam.hpp>
#include <strata/nn/layers/attention.hpp>
#include <strata/nn/optimizers/adam_w.hpp>
#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/layers/conv2d.hpp>
#include <strata/nn/layers/dense.hpp>
#include <strata/nn/layers/dropout.hpp>
#include <strata/nn/layers/embedding.hpp>
#include <strata/nn/layers/flatten.hpp>
#include <strata/nn/layers/activations.hpp>
#include <strata/nn/layers/layer_norm.hpp>
#include <strata/nn/optimizers/learning_rate.hpp>
#include <strata/nn/program/losses.hpp>
#include <strata/nn/layers/max_pool2d.hpp>
#include <strata/nn/program/metrics.hpp>
#include <strata/nn/layers/position_embedding.hpp>
#include <strata/nn/layers/reshape.hpp>
#include <strata/nn/layers/merge.hpp>
#include <strata/nn/model/model.hpp>
#include <strata/nn/program/node.hpp>
#include <strata/nn/model/sequential.hpp>
#include <strata/nn/optimizers/sgd.hpp>
#include <strata/nn/callbacks/keras_callbacks.hpp>
#include <strata/nn/callbacks/tensorboard.hpp>
