// Elementwise and normalisation kernels. The scalar formulas (GeLU, SiLU and their
// derivatives) come from kernels/activations.hpp, shared with the CPU references.
#include "kernels/activations.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/elementwise.hpp"

namespace loom::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kColThreads = 32, kColRows = 8;  // column reductions: 32 columns x 8 row lanes

unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

/// Sum of x over the CTA (kThreads threads); every thread gets the result.
__device__ float block_sum(float x) {
  __shared__ float partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  __syncthreads();  // partial may still be read by a previous call
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = x;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

__global__ void bias_gelu_fwd_kernel(std::int64_t n, int cols, const float* x, const float* bias,
                                     float* y) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) y[i] = gelu_tanh(x[i] + (bias != nullptr ? bias[i % cols] : 0.0f));
}

__global__ void bias_gelu_bwd_kernel(std::int64_t n, int cols, const float* x, const float* bias,
                                     const float* dy, float* dx) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) dx[i] = dy[i] * gelu_tanh_grad(x[i] + (bias != nullptr ? bias[i % cols] : 0.0f));
}

__global__ void swiglu_fwd_kernel(std::int64_t n, int cols, const float* gate_up, float* y) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  const std::int64_t r = i / cols, c = i % cols;
  y[i] = silu(gate_up[r * 2 * cols + c]) * gate_up[r * 2 * cols + cols + c];
}

__global__ void swiglu_bwd_kernel(std::int64_t n, int cols, const float* gate_up, const float* dy,
                                  float* d_gate_up) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  const std::int64_t r = i / cols, c = i % cols;
  const float gate = gate_up[r * 2 * cols + c], up = gate_up[r * 2 * cols + cols + c];
  d_gate_up[r * 2 * cols + c] = dy[i] * up * silu_grad(gate);
  d_gate_up[r * 2 * cols + cols + c] = dy[i] * silu(gate);
}

__global__ void rmsnorm_fwd_kernel(int cols, const float* x, const float* weight, float eps,
                                   float* y, float* rstd) {
  const float* xr = x + static_cast<std::int64_t>(blockIdx.x) * cols;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < cols; c += kThreads) ss += xr[c] * xr[c];
  const float rs = rsqrtf(block_sum(ss) / cols + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
  float* yr = y + static_cast<std::int64_t>(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += kThreads) yr[c] = xr[c] * rs * weight[c];
}

__global__ void rmsnorm_bwd_input_kernel(int cols, const float* x, const float* weight,
                                         const float* rstd, const float* dy, float* dx) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * cols;
  float gx = 0.0f;
  for (int c = threadIdx.x; c < cols; c += kThreads) gx += weight[c] * dy[base + c] * x[base + c];
  const float mean_gx = block_sum(gx) / cols, rs = rstd[blockIdx.x];
  for (int c = threadIdx.x; c < cols; c += kThreads)
    dx[base + c] = rs * (weight[c] * dy[base + c] - x[base + c] * rs * rs * mean_gx);
}

__global__ void layernorm_fwd_kernel(int cols, const float* x, const float* weight,
                                     const float* bias, float eps, float* y, float* mean,
                                     float* rstd) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += kThreads) s += x[base + c];
  const float mu = block_sum(s) / cols;
  float var = 0.0f;  // two passes: no cancellation in E[x^2] - E[x]^2
  for (int c = threadIdx.x; c < cols; c += kThreads) var += (x[base + c] - mu) * (x[base + c] - mu);
  const float rs = rsqrtf(block_sum(var) / cols + eps);
  if (threadIdx.x == 0) mean[blockIdx.x] = mu, rstd[blockIdx.x] = rs;
  for (int c = threadIdx.x; c < cols; c += kThreads)
    y[base + c] = (x[base + c] - mu) * rs * weight[c] + bias[c];
}

__global__ void layernorm_bwd_input_kernel(int cols, const float* x, const float* weight,
                                           const float* mean, const float* rstd, const float* dy,
                                           float* dx) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * cols;
  const float mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int c = threadIdx.x; c < cols; c += kThreads) {
    const float g = weight[c] * dy[base + c];
    sum_g += g;
    sum_gx += g * (x[base + c] - mu) * rs;
  }
  const float mean_g = block_sum(sum_g) / cols, mean_gx = block_sum(sum_gx) / cols;
  for (int c = threadIdx.x; c < cols; c += kThreads) {
    const float xhat = (x[base + c] - mu) * rs;
    dx[base + c] = rs * (weight[c] * dy[base + c] - mean_g - xhat * mean_gx);
  }
}

/// Column sums out[c] += sum_r term(r, c) (and out2 with term2 when given): kColRows
/// row lanes stride over rows, then a fixed-order sum in shared memory.
template <typename Term>
__global__ void column_sum_kernel(int rows, int cols, Term term, float* out, float* out2) {
  __shared__ float part[kColRows][kColThreads], part2[kColRows][kColThreads];
  const int c = blockIdx.x * kColThreads + threadIdx.x;
  float acc = 0.0f, acc2 = 0.0f;
  if (c < cols)
    for (int r = threadIdx.y; r < rows; r += kColRows) {
      acc += term.first(r, c);
      acc2 += term.second(r, c);
    }
  part[threadIdx.y][threadIdx.x] = acc;
  part2[threadIdx.y][threadIdx.x] = acc2;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float total = 0.0f, total2 = 0.0f;
  for (int y = 0; y < kColRows; ++y) total += part[y][threadIdx.x], total2 += part2[y][threadIdx.x];
  out[c] += total;
  if (out2 != nullptr) out2[c] += total2;
}

struct BiasTerm {
  int cols;
  const float* dy;
  __device__ float first(int r, int c) const { return dy[static_cast<std::int64_t>(r) * cols + c]; }
  __device__ float second(int, int) const { return 0.0f; }
};

struct RmsWeightTerm {
  int cols;
  const float* x;
  const float* rstd;
  const float* dy;
  __device__ float first(int r, int c) const {
    const std::int64_t i = static_cast<std::int64_t>(r) * cols + c;
    return dy[i] * x[i] * rstd[r];
  }
  __device__ float second(int, int) const { return 0.0f; }
};

struct LayerNormWeightTerm {
  int cols;
  const float* x;
  const float* mean;
  const float* rstd;
  const float* dy;
  __device__ float first(int r, int c) const {
    const std::int64_t i = static_cast<std::int64_t>(r) * cols + c;
    return dy[i] * (x[i] - mean[r]) * rstd[r];
  }
  __device__ float second(int r, int c) const {
    return dy[static_cast<std::int64_t>(r) * cols + c];
  }
};

template <typename Term>
void column_sum(int rows, int cols, Term term, float* out, float* out2, cudaStream_t stream,
                const char* name) {
  const dim3 block(kColThreads, kColRows);
  const auto grid = static_cast<unsigned>((cols + kColThreads - 1) / kColThreads);
  column_sum_kernel<<<grid, block, 0, stream>>>(rows, cols, term, out, out2);
  LOOM_CUDA_CHECK_LAUNCH(name);
}

__global__ void residual_add_kernel(std::int64_t n, const float* a, const float* b, float* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void add_bias_kernel(std::int64_t n, int cols, float* y, const float* bias) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) y[i] += bias[i % cols];
}

std::int64_t count(int rows, int cols) {
  return static_cast<std::int64_t>(rows) * cols;
}

}  // namespace

void bias_gelu_forward(int rows, int cols, const float* x, const float* bias, float* y,
                       cudaStream_t stream) {
  const std::int64_t n = count(rows, cols);
  bias_gelu_fwd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, cols, x, bias, y);
  LOOM_CUDA_CHECK_LAUNCH("bias_gelu_fwd_kernel");
}

void bias_gelu_backward(int rows, int cols, const float* x, const float* bias, const float* dy,
                        float* dx, cudaStream_t stream) {
  const std::int64_t n = count(rows, cols);
  bias_gelu_bwd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, cols, x, bias, dy, dx);
  LOOM_CUDA_CHECK_LAUNCH("bias_gelu_bwd_kernel");
}

void swiglu_forward(int rows, int cols, const float* gate_up, float* y, cudaStream_t stream) {
  const std::int64_t n = count(rows, cols);
  swiglu_fwd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, cols, gate_up, y);
  LOOM_CUDA_CHECK_LAUNCH("swiglu_fwd_kernel");
}

void swiglu_backward(int rows, int cols, const float* gate_up, const float* dy, float* d_gate_up,
                     cudaStream_t stream) {
  const std::int64_t n = count(rows, cols);
  swiglu_bwd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, cols, gate_up, dy, d_gate_up);
  LOOM_CUDA_CHECK_LAUNCH("swiglu_bwd_kernel");
}

void rmsnorm_forward(int rows, int cols, const float* x, const float* weight, float eps, float* y,
                     float* rstd, cudaStream_t stream) {
  rmsnorm_fwd_kernel<<<rows, kThreads, 0, stream>>>(cols, x, weight, eps, y, rstd);
  LOOM_CUDA_CHECK_LAUNCH("rmsnorm_fwd_kernel");
}

void rmsnorm_backward_input(int rows, int cols, const float* x, const float* weight,
                            const float* rstd, const float* dy, float* dx, cudaStream_t stream) {
  rmsnorm_bwd_input_kernel<<<rows, kThreads, 0, stream>>>(cols, x, weight, rstd, dy, dx);
  LOOM_CUDA_CHECK_LAUNCH("rmsnorm_bwd_input_kernel");
}

void rmsnorm_backward_weight(int rows, int cols, const float* x, const float* rstd, const float* dy,
                             float* d_weight, cudaStream_t stream) {
  column_sum(rows, cols, RmsWeightTerm{cols, x, rstd, dy}, d_weight, nullptr, stream,
             "rmsnorm weight column_sum_kernel");
}

void layernorm_forward(int rows, int cols, const float* x, const float* weight, const float* bias,
                       float eps, float* y, float* mean, float* rstd, cudaStream_t stream) {
  layernorm_fwd_kernel<<<rows, kThreads, 0, stream>>>(cols, x, weight, bias, eps, y, mean, rstd);
  LOOM_CUDA_CHECK_LAUNCH("layernorm_fwd_kernel");
}

void layernorm_backward_input(int rows, int cols, const float* x, const float* weight,
                              const float* mean, const float* rstd, const float* dy, float* dx,
                              cudaStream_t stream) {
  layernorm_bwd_input_kernel<<<rows, kThreads, 0, stream>>>(cols, x, weight, mean, rstd, dy, dx);
  LOOM_CUDA_CHECK_LAUNCH("layernorm_bwd_input_kernel");
}

void layernorm_backward_weight(int rows, int cols, const float* x, const float* mean,
                               const float* rstd, const float* dy, float* d_weight, float* d_bias,
                               cudaStream_t stream) {
  column_sum(rows, cols, LayerNormWeightTerm{cols, x, mean, rstd, dy}, d_weight, d_bias, stream,
             "layernorm weight column_sum_kernel");
}

void residual_add(std::int64_t n, const float* a, const float* b, float* out, cudaStream_t stream) {
  residual_add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, a, b, out);
  LOOM_CUDA_CHECK_LAUNCH("residual_add_kernel");
}

void add_bias(int rows, int cols, float* y, const float* bias, cudaStream_t stream) {
  const std::int64_t n = count(rows, cols);
  add_bias_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, cols, y, bias);
  LOOM_CUDA_CHECK_LAUNCH("add_bias_kernel");
}

void bias_grad(int rows, int cols, const float* dy, float* d_bias, cudaStream_t stream) {
  column_sum(rows, cols, BiasTerm{cols, dy}, d_bias, nullptr, stream, "bias column_sum_kernel");
}

}  // namespace loom::kernels
