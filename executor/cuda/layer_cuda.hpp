#pragma once
/// The model's math on the GPU, one layer at a time: exactly executor/layer_math.hpp's
/// layers (pre-norm transformer with RMSNorm eps 1e-6, GQA attention per packed sample,
/// SwiGLU or GeLU MLP; projector MLP gelu(x W1) W2; weights [in, out] row-major), built
/// from kernels/ and cuBLAS, with backward split into separate launches:
///   forward          F       y from x, saving what backward needs
///   backward_input   I (Bd)  dx from dy, keeping the output gradients W needs
///   backward_weight  W (Bw)  dW += X^T dY and the norm gains, then the state can go
/// so a deferred W runs later on the state I left behind, as the schedules split it.
/// Everything is enqueued on one stream; nothing here synchronises.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "core/model.hpp"
#include "executor/cuda/device_matrix.hpp"
#include "kernels/cuda/gemm.hpp"

namespace loom::exec::cuda {

/// What forward keeps for backward, and what I keeps for W (device tensors by name).
struct DeviceLayerState {
  DeviceTensors saved;
  DeviceTensors grads;
  std::vector<int> lengths;         ///< rows per attention sequence (an encoder's items)
  std::vector<int> sample_lengths;  ///< rows per sample (what a token_ratio resamples)
};

class LayerRunner {
 public:
  /// `head_dim` 0 means hidden / heads; a tensor-parallel shard (profiling) keeps the full
  /// model's head width with fewer heads (executor/layer_math.hpp's zero_parameters).
  LayerRunner(kernels::Blas& blas, cudaStream_t stream, int head_dim = 0)
      : blas_(blas), stream_(stream), head_dim_(head_dim) {}

  DeviceMatrix forward(const LayerSpec& spec, const DeviceTensors& params, const DeviceMatrix& x,
                       const std::vector<int>& lengths, DeviceLayerState& state);
  /// dy -> dx (empty when !need_dx). Keeps W's inputs in state.grads unless frozen.
  DeviceMatrix backward_input(const LayerSpec& spec, const DeviceTensors& params,
                              DeviceLayerState& state, const DeviceMatrix& dy, bool need_dx);
  /// Accumulates the layer's weight gradients into `grads` (shaped as the parameters).
  void backward_weight(const LayerSpec& spec, const DeviceLayerState& state, DeviceTensors& grads);

 private:
  // Row-major products with weights stored [in, out]: y = x W, dx = dy W^T, dW += x^T dy.
  // Operands may be column slices of wider matrices (ld = their row stride).
  void xw(int rows, int in, int out, const float* x, int ldx, const DeviceMatrix& w, float* y,
          int ldy, float beta = 0.0f);
  void dy_wt(int rows, int in, int out, const float* dy, int lddy, const DeviceMatrix& w, float* dx,
             float beta = 0.0f);
  void xt_dy(int rows, int in, int out, const DeviceMatrix& x, const float* dy, int lddy,
             DeviceMatrix& dw);
  void attention_forward(const LayerSpec& spec, DeviceLayerState& state);
  void attention_backward(const LayerSpec& spec, DeviceLayerState& state,
                          const DeviceMatrix& d_attn);
  /// Device mask words for one sample of `tokens` rows: every token causal (text bit and
  /// causal bit) or every token bidirectional (one modality bit), as the layer is.
  const std::uint64_t* mask(int tokens, bool causal);
  int head_dim(const LayerSpec& s) const { return head_dim_ > 0 ? head_dim_ : s.hidden / s.heads; }

  kernels::Blas& blas_;
  cudaStream_t stream_;
  int head_dim_;
  /// Masks by (tokens, causal), in stream-ordered memory (2 floats per 64-bit word):
  /// cudaMalloc / cudaMemcpy mid-run could synchronise behind a stuck receive.
  std::map<std::pair<int, bool>, DeviceMatrix> masks_;
};

}  // namespace loom::exec::cuda
