#pragma once
//! The build configuration every header reads: <strata/config.hpp>, which
//! Meson generates (a Meson build, an installed strata), or, in a build by
//! hand with only `-I include`, defaults taken from what the compiler can
//! find: a backend is on when its header is on the include path (<mpi.h>
//! under mpicxx, <cuda_runtime_api.h> and <cublas_v2.h> under nvcc or with
//! -I/usr/local/cuda/include, <nccl.h> beside CUDA, <cblas.h>). Any macro
//! set on the command line wins (-DSTRATA_HAS_MPI=0). docs/building.md.
//!   #include <strata/core/build_config.hpp>
//!   #if STRATA_HAS_MPI ... #endif

#if __has_include(<strata/config.hpp>)
#include <strata/config.hpp>
#endif

#ifndef STRATA_VERSION
#define STRATA_VERSION "0.1.0"  // include/strata/meson.build checks it against meson.build's version
#endif
#ifndef STRATA_HAS_MPI
#if __has_include(<mpi.h>)
#define STRATA_HAS_MPI 1
#else
#define STRATA_HAS_MPI 0
#endif
#endif
#ifndef STRATA_HAS_CUDA
#if __has_include(<cuda_runtime_api.h>) && __has_include(<cublas_v2.h>)
#define STRATA_HAS_CUDA 1
#else
#define STRATA_HAS_CUDA 0
#endif
#endif
#ifndef STRATA_HAS_NCCL
#if STRATA_HAS_CUDA && __has_include(<nccl.h>)
#define STRATA_HAS_NCCL 1
#else
#define STRATA_HAS_NCCL 0
#endif
#endif
#ifndef STRATA_HAS_CBLAS
#if __has_include(<cblas.h>)
#define STRATA_HAS_CBLAS 1
#else
#define STRATA_HAS_CBLAS 0
#endif
#endif
