#pragma once
/// Scalar activation functions and their derivatives, host+device, shared by the CUDA
/// elementwise kernels and the CPU references (one formula, two callers).
#include <cmath>

#include "core/host_device.hpp"  // LOOM_HD

namespace loom::kernels {

/// GeLU, tanh approximation (Hendrycks & Gimpel; GPT-2's "gelu_new"):
///   gelu(x) = 0.5 x (1 + tanh(c (x + 0.044715 x^3))),  c = sqrt(2 / pi).
LOOM_HD float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

/// d gelu_tanh / dx.
LOOM_HD float gelu_tanh_grad(float x) {
  const float c = 0.7978845608028654f;
  const float t = tanhf(c * (x + 0.044715f * x * x * x));
  const float dt = c * (1.0f + 3.0f * 0.044715f * x * x) * (1.0f - t * t);
  return 0.5f * (1.0f + t) + 0.5f * x * dt;
}

/// SiLU (swish) x * sigmoid(x), the gate of SwiGLU (Shazeer 2020, used by Llama-3).
LOOM_HD float silu(float x) {
  return x / (1.0f + expf(-x));
}

/// d silu / dx = sigmoid(x) (1 + x (1 - sigmoid(x))).
LOOM_HD float silu_grad(float x) {
  const float sig = 1.0f / (1.0f + expf(-x));
  return sig * (1.0f + x * (1.0f - sig));
}

}  // namespace loom::kernels
