#include "kernels/reference/elementwise_ref.hpp"

#include <cmath>
#include <cstddef>

#include "kernels/activations.hpp"

namespace loom::kernels {
namespace {

std::ptrdiff_t at(int r, int cols, int c) {
  return static_cast<std::ptrdiff_t>(r) * cols + c;
}

}  // namespace

void bias_gelu_forward_ref(int rows, int cols, const float* x, const float* bias, float* y) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      y[at(r, cols, c)] = gelu_tanh(x[at(r, cols, c)] + (bias != nullptr ? bias[c] : 0.0f));
}

void bias_gelu_backward_ref(int rows, int cols, const float* x, const float* bias, const float* dy,
                            float* dx) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const std::ptrdiff_t i = at(r, cols, c);
      dx[i] = dy[i] * gelu_tanh_grad(x[i] + (bias != nullptr ? bias[c] : 0.0f));
    }
}

void swiglu_forward_ref(int rows, int cols, const float* gate_up, float* y) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const float gate = gate_up[at(r, 2 * cols, c)], up = gate_up[at(r, 2 * cols, cols + c)];
      y[at(r, cols, c)] = silu(gate) * up;
    }
}

void swiglu_backward_ref(int rows, int cols, const float* gate_up, const float* dy,
                         float* d_gate_up) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const float gate = gate_up[at(r, 2 * cols, c)], up = gate_up[at(r, 2 * cols, cols + c)];
      const float g = dy[at(r, cols, c)];
      d_gate_up[at(r, 2 * cols, c)] = g * up * silu_grad(gate);
      d_gate_up[at(r, 2 * cols, cols + c)] = g * silu(gate);
    }
}

void rmsnorm_forward_ref(int rows, int cols, const float* x, const float* weight, float eps,
                         float* y, float* rstd) {
  for (int r = 0; r < rows; ++r) {
    double sum_sq = 0.0;
    for (int c = 0; c < cols; ++c) sum_sq += double(x[at(r, cols, c)]) * x[at(r, cols, c)];
    const float rs = 1.0f / std::sqrt(static_cast<float>(sum_sq / cols) + eps);
    rstd[r] = rs;
    for (int c = 0; c < cols; ++c) y[at(r, cols, c)] = x[at(r, cols, c)] * rs * weight[c];
  }
}

void rmsnorm_backward_input_ref(int rows, int cols, const float* x, const float* weight,
                                const float* rstd, const float* dy, float* dx) {
  for (int r = 0; r < rows; ++r) {
    double gx = 0.0;
    for (int c = 0; c < cols; ++c) gx += double(weight[c]) * dy[at(r, cols, c)] * x[at(r, cols, c)];
    const float mean_gx = static_cast<float>(gx / cols), rs = rstd[r];
    for (int c = 0; c < cols; ++c) {
      const std::ptrdiff_t i = at(r, cols, c);
      dx[i] = rs * (weight[c] * dy[i] - x[i] * rs * rs * mean_gx);
    }
  }
}

void rmsnorm_backward_weight_ref(int rows, int cols, const float* x, const float* rstd,
                                 const float* dy, float* d_weight) {
  for (int c = 0; c < cols; ++c) {
    double acc = 0.0;
    for (int r = 0; r < rows; ++r) acc += double(dy[at(r, cols, c)]) * x[at(r, cols, c)] * rstd[r];
    d_weight[c] += static_cast<float>(acc);
  }
}

void layernorm_forward_ref(int rows, int cols, const float* x, const float* weight,
                           const float* bias, float eps, float* y, float* mean, float* rstd) {
  for (int r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int c = 0; c < cols; ++c) sum += x[at(r, cols, c)];
    const double mu = sum / cols;
    double var = 0.0;
    for (int c = 0; c < cols; ++c) var += (x[at(r, cols, c)] - mu) * (x[at(r, cols, c)] - mu);
    const float rs = 1.0f / std::sqrt(static_cast<float>(var / cols) + eps);
    mean[r] = static_cast<float>(mu);
    rstd[r] = rs;
    for (int c = 0; c < cols; ++c)
      y[at(r, cols, c)] = (x[at(r, cols, c)] - mean[r]) * rs * weight[c] + bias[c];
  }
}

void layernorm_backward_input_ref(int rows, int cols, const float* x, const float* weight,
                                  const float* mean, const float* rstd, const float* dy,
                                  float* dx) {
  for (int r = 0; r < rows; ++r) {
    double sum_g = 0.0, sum_gx = 0.0;
    for (int c = 0; c < cols; ++c) {
      const float g = weight[c] * dy[at(r, cols, c)];
      sum_g += g;
      sum_gx += double(g) * (x[at(r, cols, c)] - mean[r]) * rstd[r];
    }
    const float mean_g = static_cast<float>(sum_g / cols);
    const float mean_gx = static_cast<float>(sum_gx / cols);
    for (int c = 0; c < cols; ++c) {
      const std::ptrdiff_t i = at(r, cols, c);
      const float xhat = (x[i] - mean[r]) * rstd[r];
      dx[i] = rstd[r] * (weight[c] * dy[i] - mean_g - xhat * mean_gx);
    }
  }
}

void layernorm_backward_weight_ref(int rows, int cols, const float* x, const float* mean,
                                   const float* rstd, const float* dy, float* d_weight,
                                   float* d_bias) {
  for (int c = 0; c < cols; ++c) {
    double dw = 0.0, db = 0.0;
    for (int r = 0; r < rows; ++r) {
      const std::ptrdiff_t i = at(r, cols, c);
      dw += double(dy[i]) * (x[i] - mean[r]) * rstd[r];
      db += dy[i];
    }
    d_weight[c] += static_cast<float>(dw);
    d_bias[c] += static_cast<float>(db);
  }
}

void residual_add_ref(std::int64_t n, const float* a, const float* b, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_bias_ref(int rows, int cols, float* y, const float* bias) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) y[at(r, cols, c)] += bias[c];
}

void bias_grad_ref(int rows, int cols, const float* dy, float* d_bias) {
  for (int c = 0; c < cols; ++c) {
    double acc = 0.0;
    for (int r = 0; r < rows; ++r) acc += dy[at(r, cols, c)];
    d_bias[c] += static_cast<float>(acc);
  }
}

}  // namespace loom::kernels
