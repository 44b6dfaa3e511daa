#pragma once
//! The MPI backend's entry: <mpi.h> (C API only) and the small helpers every
//! MPI header shares. Including any strata/comm/mpi header without the MPI
//! backend stops the build with the option to enable.

#include <strata/core/build_config.hpp>  // <strata/config.hpp>, or defaults in a build by hand

#if !STRATA_HAS_MPI
#error "strata/comm/mpi needs the MPI backend: install Open MPI (libopenmpi-dev) and configure strata with -Dmpi=enabled (meson setup -Dmpi=enabled), and link the target with the strata-mpi dependency (strata_mpi_dep); by hand, compile with mpicxx (docs/building.md)"
#endif

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the deprecated C++ bindings do not build warning-free
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdint>
#include <string>

#include <strata/core/concepts.hpp>
#include <strata/core/error.hpp>

namespace strata::detail::mpi {

//! The MPI datatype of a strata element type (bf16 and fp16 travel as
//! MPI_UINT16_T, reduced by strata's own operation: all_reduce.hpp).
template <WireElement T>
MPI_Datatype datatype() noexcept {
  if constexpr (std::same_as<T, float>) return MPI_FLOAT;
  else if constexpr (std::same_as<T, double>) return MPI_DOUBLE;
  else if constexpr (std::same_as<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::same_as<T, std::int64_t>) return MPI_INT64_T;
  else return MPI_UINT16_T;
}

//! Throws strata::Error naming the MPI call when `rc` is not MPI_SUCCESS.
inline void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("strata: ") + call + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

//! Element counts cross MPI as int.
inline int as_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT32_MAX))
    throw Error(std::string("strata: ") + what + ": " + std::to_string(n) +
                " elements exceed what one MPI call can carry (2^31 - 1); split the buffer");
  return static_cast<int>(n);
}

}  // namespace strata::detail::mpi
