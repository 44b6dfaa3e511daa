#pragma once
//! STRATA_HD marks a function that both the host and the CUDA backend's
//! kernels run (`__host__ __device__` under nvcc, nothing for g++): the
//! bodies written once (kernels/bodies/), the counter-based Rng, the
//! reduction operations' combine.
//!   STRATA_HD inline float twice(float x) { return 2.f * x; }
#ifndef STRATA_HD
#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif
#endif
