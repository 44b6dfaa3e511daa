#pragma once
//! The activations a layer can apply after its affine part (Dense's
//! `activation` option, the activation layers). Their arithmetic is in the
//! compute vocabulary (kernels/compute.hpp: bias_activate,
//! activation_backward), one implementation per space.
//!   strata::nn::Dense{128, {.activation = strata::nn::Activation::ReLU}};

#include <strata/kernels/compute.hpp>

namespace strata::nn {

using kernels::Activation;

namespace detail {
using kernels::activation_name;
}  // namespace detail

}  // namespace strata::nn
