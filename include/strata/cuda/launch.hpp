#pragma once
//! The kernel launchers behind CudaCompute, declared for host code (g++)
//! and defined in include/strata/cuda/kernels/*.cuh, which only nvcc sees
//! (compiled once, through include/strata/cuda/strata_cuda.cu). Each
//! enqueues its work on `s`, launches nothing for an empty size, and checks
//! the launch (CudaError naming the kernel). Pointers are device pointers;
//! the semantics are those of kernels::Compute's member of the same name.
//!   strata::cuda::detail::launch_axpy(stream, 0.5f, x, y, n);
//!   strata::cuda::detail::launch_fill(stream, y, 0.f, n);

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include <strata/kernels/compute.hpp>

namespace strata::cuda::detail {

using kernels::Activation;
using kernels::AdamStep;
using kernels::AdamWStep;
using kernels::SgdStep;
using kernels::Window2D;

// maps.cuh
void launch_fill(cudaStream_t s, float* x, float value, std::size_t n);
//! c[i, j] = beta * c[i, j] (0 when beta is 0) over rows x cols with leading dimension ldc: a GEMM with k = 0.
void launch_scale_matrix(cudaStream_t s, float* c, float beta, std::size_t rows, std::size_t cols, std::size_t ldc);
void launch_bias_activate(cudaStream_t s, Activation a, const float* x, const float* bias, float* y, std::size_t rows,
                          std::size_t cols);
void launch_activation_backward(cudaStream_t s, Activation a, const float* z, const float* y, const float* dy,
                                float* dz, std::size_t rows, std::size_t cols);
void launch_axpy(cudaStream_t s, float a, const float* x, float* y, std::size_t n);
void launch_dropout(cudaStream_t s, const float* x, float* y, float* mask, std::size_t n, std::uint64_t key,
                    float rate);
void launch_multiply(cudaStream_t s, const float* x, const float* mask, float* y, std::size_t n);
void launch_round_to_wire(cudaStream_t s, WireFormat f, const float* g, const float* res, float* next, void* out,
                          std::size_t n);
void launch_expand_wire(cudaStream_t s, WireFormat f, const void* w, float* g, std::size_t n);
void launch_dropout_at(cudaStream_t s, const float* x, float* y, float* mask, std::size_t n, std::uint64_t key_base,
                       std::uint64_t layer, std::uint64_t salt, const kernels::StepCounters* c, float rate);

// layer_norm.cuh
void launch_layer_norm(cudaStream_t s, const float* x, const float* gamma, const float* beta, float* y, float* xhat,
                       float* rstd, std::size_t rows, std::size_t cols, float eps);
void launch_layer_norm_backward(cudaStream_t s, const float* dy, const float* xhat, const float* rstd,
                                const float* gamma, float* dx, float* dgamma_rows, std::size_t rows, std::size_t cols);

// reductions.cuh
void launch_column_sums(cudaStream_t s, const float* x, float* out, std::size_t rows, std::size_t cols);
void launch_add_square_sum(cudaStream_t s, const float* x, std::size_t n, float k, double* acc);

// losses.cuh
void launch_sparse_crossentropy(cudaStream_t s, const float* pred, const float* labels, float* d, float scale,
                                std::size_t rows, std::size_t classes, bool from_logits, double* acc,
                                double* invalid);
void launch_categorical_crossentropy(cudaStream_t s, const float* pred, const float* labels, float* d, float scale,
                                     std::size_t rows, std::size_t classes, bool from_logits, double* acc);
void launch_mean_squared_error(cudaStream_t s, const float* pred, const float* labels, float* d, float scale,
                               std::size_t rows, std::size_t width, double* acc);
void launch_sparse_hits(cudaStream_t s, const float* pred, const float* labels, std::size_t rows,
                        std::size_t classes, double* acc, double* invalid);
void launch_categorical_hits(cudaStream_t s, const float* pred, const float* labels, std::size_t rows,
                             std::size_t classes, double* acc);
void launch_binary_hits(cudaStream_t s, const float* pred, const float* labels, std::size_t n, double* acc);

// conv.cuh
void launch_im2col(cudaStream_t s, const Window2D& g, const float* x, float* col);
void launch_col2im(cudaStream_t s, const Window2D& g, const float* col, float* dx);
void launch_max_pool(cudaStream_t s, const Window2D& g, const float* x, float* y, std::uint32_t* argmax);
void launch_max_pool_backward(cudaStream_t s, const Window2D& g, const float* dy, const std::uint32_t* argmax,
                              float* dx);

// optim.cuh
void launch_sgd(cudaStream_t s, float* w, const float* g, float* v, std::size_t n, const SgdStep& step);
void launch_adam(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& step);
void launch_sgd_at(cudaStream_t s, float* w, const float* g, float* v, std::size_t n, const SgdStep& step,
                   const kernels::DeviceStep& d);
void launch_adam_at(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& step,
                    const kernels::DeviceStep& d);
void launch_adamw(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n, const AdamWStep& step);
void launch_adamw_at(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n,
                     const AdamWStep& step, const kernels::DeviceStep& d);
void launch_square_sum(cudaStream_t s, const float* x, std::size_t n, double* out);
void launch_clip_by_norm(cudaStream_t s, float* x, std::size_t n, float clipnorm, const double* sumsq);
void launch_end_step(cudaStream_t s, kernels::StepCounters* c, bool gated);

//! *acc += the NaN and infinite values of x[0, n) (cuda/kernels/reductions.cuh).
void launch_count_nonfinite(cudaStream_t s, const float* x, std::size_t n, double* acc);
// cuda/kernels/attention.cuh and sequence_losses.cuh: kernels::Compute's members of the same names
void launch_attention_softmax(cudaStream_t s, const float* x, float* y, std::size_t rows, std::size_t cols,
                              bool causal);
void launch_embedding(cudaStream_t s, const float* table, const float* ids, float* y, std::size_t n,
                      std::size_t vocab, std::size_t width);
void launch_embedding_backward(cudaStream_t s, const float* ids, const float* dy, float* dtable, std::size_t n,
                               std::size_t vocab, std::size_t width);
void launch_sequence_crossentropy(cudaStream_t s, const float* pred, const float* labels, float* d, float scale,
                                  const kernels::SequenceLabels& labels_shape, bool from_logits, double* acc,
                                  double* invalid);
void launch_sequence_hits(cudaStream_t s, const float* pred, const float* labels,
                          const kernels::SequenceLabels& labels_shape, double* acc, double* invalid);

}  // namespace strata::cuda::detail
