#pragma once
/// CPU references of the elementwise and normalisation kernels of a transformer block
/// (kernels/cuda/elementwise.cu has the same functions on device pointers). Matrices are
/// row-major [rows][cols] float. Backward is split like the block's launches: *_input
/// functions give the input gradient (the block's I / Bd pass), *_weight functions
/// ACCUMULATE (+=) parameter gradients (the W / Bw pass), so gradients of several
/// microbatches add up as pipeline training needs.
#include <cstdint>

namespace loom::kernels {

/// y = gelu_tanh(x + bias) (bias broadcast over rows; nullptr: no bias).
void bias_gelu_forward_ref(int rows, int cols, const float* x, const float* bias, float* y);
/// dx = dy * gelu_tanh'(x + bias); dx is also the bias's gradient before the column sum.
void bias_gelu_backward_ref(int rows, int cols, const float* x, const float* bias, const float* dy,
                            float* dx);

/// SwiGLU: gate_up is [rows][2 * cols] (gate columns first, then up columns);
/// y[r][c] = silu(gate) * up.
void swiglu_forward_ref(int rows, int cols, const float* gate_up, float* y);
/// d_gate_up = [dy * up * silu'(gate), dy * silu(gate)].
void swiglu_backward_ref(int rows, int cols, const float* gate_up, const float* dy,
                         float* d_gate_up);

/// RMSNorm (Zhang & Sennrich 2019): y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
/// rstd (one per row) is saved for the backward.
void rmsnorm_forward_ref(int rows, int cols, const float* x, const float* weight, float eps,
                         float* y, float* rstd);
/// dx = rstd (g - x rstd^2 mean(g x)), g = weight * dy.
void rmsnorm_backward_input_ref(int rows, int cols, const float* x, const float* weight,
                                const float* rstd, const float* dy, float* dx);
/// d_weight += sum over rows of dy * x * rstd.
void rmsnorm_backward_weight_ref(int rows, int cols, const float* x, const float* rstd,
                                 const float* dy, float* d_weight);

/// LayerNorm (Ba et al. 2016): y = (x - mean) rstd * weight + bias; mean and rstd saved.
void layernorm_forward_ref(int rows, int cols, const float* x, const float* weight,
                           const float* bias, float eps, float* y, float* mean, float* rstd);
/// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = weight * dy, xhat = (x - mean) rstd.
void layernorm_backward_input_ref(int rows, int cols, const float* x, const float* weight,
                                  const float* mean, const float* rstd, const float* dy, float* dx);
/// d_weight += sum dy * xhat, d_bias += sum dy (over rows).
void layernorm_backward_weight_ref(int rows, int cols, const float* x, const float* mean,
                                   const float* rstd, const float* dy, float* d_weight,
                                   float* d_bias);

/// out = a + b (n elements; out may alias a or b): the block's residual connections.
void residual_add_ref(std::int64_t n, const float* a, const float* b, float* out);
/// y[r][c] += bias[c].
void add_bias_ref(int rows, int cols, float* y, const float* bias);
/// d_bias[c] += sum over rows of dy[r][c].
void bias_grad_ref(int rows, int cols, const float* dy, float* d_bias);

}  // namespace loom::kernels
