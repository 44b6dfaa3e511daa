#pragma once
//! The layers' names for the seeded generator of core/random.hpp (which
//! data/ shares): same functions, same values, so initializations and
//! dropout masks are unchanged.
//!   strata::nn::Rng rng{strata::nn::detail::mix(seed, replica, step)};
//!   float u = rng.uniform();   // [0, 1)
//! Deterministic: a replica's stream is a pure function of (seed, replica, step).

#include <strata/core/random.hpp>

namespace strata::nn {

namespace detail {
using strata::detail::mix;
using strata::detail::splitmix;
}  // namespace detail

//! strata::Rng under the name the layers have always used.
//!   strata::nn::Rng rng{1};  float u = rng.uniform();
using strata::Rng;

}  // namespace strata::nn
