#pragma once
/// The optimizer step the executors run for an OptimizerStep op: Adam (Kingma and Ba,
/// ICLR'15, Algorithm 1) at PyTorch's torch.optim.Adam defaults (lr 1e-3, betas 0.9 and
/// 0.999, eps 1e-8, no weight decay), on float tensors. The host backend, the CUDA
/// backend's kernel (executor/cuda/data_ops.cu) and the reference all follow this.
#include <vector>

namespace loom::exec {

inline constexpr float kAdamLr = 1e-3F;
inline constexpr float kAdamBeta1 = 0.9F;
inline constexpr float kAdamBeta2 = 0.999F;
inline constexpr float kAdamEps = 1e-8F;

/// One tensor's optimizer state: the first and second moments and the steps taken.
struct AdamState {
  std::vector<float> m, v;
  int step = 0;
};

/// One Adam step of `param` with gradient `grad` (same size); moments start at zero.
void adam_step(std::vector<float>& param, const std::vector<float>& grad, AdamState& state);

}  // namespace loom::exec
