#pragma once
/// The transformer block's elementwise and normalisation kernels on the GPU (fp32),
/// one function per reference in kernels/reference/elementwise_ref.hpp with the same
/// arguments (device pointers) plus a stream. Weight-gradient functions accumulate (+=).
/// Row reductions use one CTA per row; column reductions (weight gradients) one thread per
/// column and a fixed summation order, so results are deterministic run to run.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::kernels {

void bias_gelu_forward(int rows, int cols, const float* x, const float* bias, float* y,
                       cudaStream_t stream);
void bias_gelu_backward(int rows, int cols, const float* x, const float* bias, const float* dy,
                        float* dx, cudaStream_t stream);
void swiglu_forward(int rows, int cols, const float* gate_up, float* y, cudaStream_t stream);
void swiglu_backward(int rows, int cols, const float* gate_up, const float* dy, float* d_gate_up,
                     cudaStream_t stream);
void rmsnorm_forward(int rows, int cols, const float* x, const float* weight, float eps, float* y,
                     float* rstd, cudaStream_t stream);
void rmsnorm_backward_input(int rows, int cols, const float* x, const float* weight,
                            const float* rstd, const float* dy, float* dx, cudaStream_t stream);
void rmsnorm_backward_weight(int rows, int cols, const float* x, const float* rstd, const float* dy,
                             float* d_weight, cudaStream_t stream);
void layernorm_forward(int rows, int cols, const float* x, const float* weight, const float* bias,
                       float eps, float* y, float* mean, float* rstd, cudaStream_t stream);
void layernorm_backward_input(int rows, int cols, const float* x, const float* weight,
                              const float* mean, const float* rstd, const float* dy, float* dx,
                              cudaStream_t stream);
void layernorm_backward_weight(int rows, int cols, const float* x, const float* mean,
                               const float* rstd, const float* dy, float* d_weight, float* d_bias,
                               cudaStream_t stream);
void residual_add(std::int64_t n, const float* a, const float* b, float* out, cudaStream_t stream);
void add_bias(int rows, int cols, float* y, const float* bias, cudaStream_t stream);
void bias_grad(int rows, int cols, const float* dy, float* d_bias, cudaStream_t stream);

}  // namespace loom::kernels
