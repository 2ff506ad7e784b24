#pragma once
/// Data movement kernels of the cuda backend that are not layer math.
///
/// Token resampling, a module's token_ratio (executor/host_state.cpp's, same spans):
/// per sample, T rows -> round(T ratio) rows, output row i the mean of input rows
/// [lo_i, hi_i) with lo_i = i T / n, hi_i = max(lo_i + 1, (i + 1) T / n).
#include <cuda_runtime_api.h>

#include <vector>

#include "executor/cuda/device_matrix.hpp"

namespace loom::exec::cuda {

DeviceMatrix resample_forward(const DeviceMatrix& x, const std::vector<int>& in_lengths,
                              const std::vector<int>& out_lengths, cudaStream_t stream);
/// The adjoint: dx[r] = sum over output rows i whose span holds r of dy[i] / |span i|.
DeviceMatrix resample_backward(const DeviceMatrix& dy, const std::vector<int>& in_lengths,
                               const std::vector<int>& out_lengths, cudaStream_t stream);

/// The loss gradient of L = sum_rows scale_r sum_c 0.5 (y - t)^2: dy = (y - t) scale_r.
DeviceMatrix mse_gradient(const DeviceMatrix& y, const DeviceMatrix& target,
                          const DeviceMatrix& row_scale, cudaStream_t stream);

/// One Adam step (executor/adam.hpp: the host backend's constants and formula) of `param`
/// with `grad`, updating the moments `m` and `v` (zeros before the first step) in place;
/// `step` counts from 1.
void adam_step(DeviceMatrix& param, const DeviceMatrix& grad, DeviceMatrix& m, DeviceMatrix& v,
               int step, cudaStream_t stream);

}  // namespace loom::exec::cuda
