//! The CUDA backend's one translation unit: every kernel of strata and
//! make_compute. A GPU program compiles this file once with nvcc and links
//! it (Meson: strata_cuda_dep); everything else is headers for g++.
//!   nvcc -std=c++20 -O3 -Iinclude -I<build>/include -gencode arch=compute_90,code=[sm_90,compute_90]
//!        -c include/strata/cuda/strata_cuda.cu -o strata_cuda.o

#include <strata/cuda/compute.hpp>
#include <strata/cuda/kernels/attention.cuh>
#include <strata/cuda/kernels/collectives.cuh>
#include <strata/cuda/kernels/conv.cuh>
#include <strata/cuda/kernels/layer_norm.cuh>
#include <strata/cuda/kernels/losses.cuh>
#include <strata/cuda/kernels/maps.cuh>
#include <strata/cuda/kernels/optim.cuh>
#include <strata/cuda/kernels/reductions.cuh>
#include <strata/cuda/kernels/sequence_losses.cuh>

namespace strata::cuda {

std::unique_ptr<kernels::Compute> make_compute(int device, MathMode math) {
  return std::make_unique<CudaCompute>(device, math);
}

}  // namespace strata::cuda
