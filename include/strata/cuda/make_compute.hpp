#pragma once
//! The CUDA compute without CUDA headers: code that only needs "a Compute
//! on GPU d" (strategies, benchmarks, examples) includes this header and
//! links the CUDA backend (Meson: strata_cuda_dep), and never sees
//! <cuda_runtime.h>.
//!   std::unique_ptr<strata::kernels::Compute> c = strata::cuda::make_compute(0);
//!   c->gemm(false, false, m, n, k, 1.f, a, k, b, n, 0.f, y, n);

#include <memory>

#include <strata/kernels/compute.hpp>

namespace strata::cuda {

//! The number format of a CudaCompute's matrix products (every other op is
//! FP32): the strategies' MatmulPrecision (kernels/compute.hpp). FP32: IEEE
//! single precision (cuBLAS default math). TF32: tensor cores with 10-bit
//! mantissas for the products, FP32 accumulation (CUBLAS_TF32_TENSOR_OP_MATH).
//! BF16: inputs rounded to bfloat16 on the fly, FP32 accumulation
//! (cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF).
//!   auto c = strata::cuda::make_compute(0, strata::cuda::MathMode::TF32);
//!   // about 8x the FP32 throughput of an H100 for large products, relative error ~1e-3
using MathMode = kernels::MatmulPrecision;

//! A CudaCompute on `device` (a kernels::Compute whose pointers are device
//! pointers, work ordered on its own stream). CudaError for a device that
//! does not exist. Defined in strata_cuda.cu (link strata_cuda_dep).
//!   auto gpu = strata::cuda::make_compute(0);
//!   float* p = static_cast<float*>(gpu->allocate(n * sizeof(float)));
std::unique_ptr<kernels::Compute> make_compute(int device, MathMode math = MathMode::FP32);

}  // namespace strata::cuda
