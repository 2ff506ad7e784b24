// Data movement kernels of the cuda backend. The resampling spans are closed-form in the
// per-sample lengths, which travel as a kernel argument: no index upload, so nothing here
// synchronises or waits on a stream (a wait could hang behind a stuck receive).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "executor/adam.hpp"
#include "executor/cuda/data_ops.hpp"
#include "kernels/cuda/check.hpp"

namespace loom::exec::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSamples = 256;  // per microbatch; 2 KiB of kernel arguments

struct Lengths {
  int samples;
  int in[kMaxSamples];
  int out[kMaxSamples];
};

/// executor/host_state.cpp's span of output row i of a sample with `in` -> `out` rows.
__device__ void span(int i, int in, int out, int* lo, int* hi) {
  *lo = static_cast<int>(static_cast<long>(i) * in / out);
  *hi = max(*lo + 1, static_cast<int>(static_cast<long>(i + 1) * in / out));
}

/// Sample of row `row` counting rows with `len`; *first = that sample's first row.
__device__ int sample_of(int row, const int* len, int samples, int* first) {
  int start = 0;
  for (int s = 0; s < samples; ++s) {
    if (row < start + len[s]) {
      *first = start;
      return s;
    }
    start += len[s];
  }
  *first = start;
  return samples - 1;
}

__device__ int offset_of(int sample, const int* len) {
  int start = 0;
  for (int s = 0; s < sample; ++s) start += len[s];
  return start;
}

/// out row i = mean of the input rows of its span.
__global__ void resample_forward_kernel(int rows, int cols, Lengths l, const float* x, float* out) {
  const long e = static_cast<long>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= static_cast<long>(rows) * cols) return;
  const int i = static_cast<int>(e / cols), c = static_cast<int>(e % cols);
  int first = 0;
  const int s = sample_of(i, l.out, l.samples, &first);
  int lo = 0, hi = 0;
  span(i - first, l.in[s], l.out[s], &lo, &hi);
  const int base = offset_of(s, l.in);
  float acc = 0.0f;
  for (int r = lo; r < hi; ++r) acc += x[static_cast<long>(base + r) * cols + c];
  out[e] = acc / static_cast<float>(hi - lo);
}

/// dx row r = sum over the output rows whose span holds r of dy / |span|. Those rows lie
/// within one of r out / in (spans are contiguous and ordered), so a small window is
/// scanned instead of a list.
__global__ void resample_backward_kernel(int rows, int cols, Lengths l, const float* dy,
                                         float* dx) {
  const long e = static_cast<long>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= static_cast<long>(rows) * cols) return;
  const int r_abs = static_cast<int>(e / cols), c = static_cast<int>(e % cols);
  int first = 0;
  const int s = sample_of(r_abs, l.in, l.samples, &first);
  const int r = r_abs - first, in = l.in[s], out = l.out[s];
  const int base = offset_of(s, l.out);
  const int i_lo = max(0, static_cast<int>(static_cast<long>(r) * out / in) - 1);
  const int i_hi = min(out, static_cast<int>(static_cast<long>(r + 1) * out / in) + 2);
  float acc = 0.0f;
  for (int i = i_lo; i < i_hi; ++i) {
    int lo = 0, hi = 0;
    span(i, in, out, &lo, &hi);
    if (lo <= r && r < hi) acc += dy[static_cast<long>(base + i) * cols + c] / (hi - lo);
  }
  dx[e] = acc;
}

__global__ void mse_gradient_kernel(int rows, int cols, const float* y, const float* t,
                                    const float* scale, float* dy) {
  const long e = static_cast<long>(blockIdx.x) * kThreads + threadIdx.x;
  if (e < static_cast<long>(rows) * cols) dy[e] = (y[e] - t[e]) * scale[e / cols];
}

__global__ void adam_kernel(long n, float bias1, float bias2, const float* g, float* p, float* m,
                            float* v) {
  const long e = static_cast<long>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= n) return;
  m[e] = kAdamBeta1 * m[e] + (1.0f - kAdamBeta1) * g[e];
  v[e] = kAdamBeta2 * v[e] + (1.0f - kAdamBeta2) * g[e] * g[e];
  p[e] -= kAdamLr * (m[e] / bias1) / (sqrtf(v[e] / bias2) + kAdamEps);
}

unsigned blocks(long n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

int total(const std::vector<int>& v) {
  int t = 0;
  for (int x : v) t += x;
  return t;
}

Lengths pack(const std::vector<int>& in, const std::vector<int>& out) {
  if (in.size() > static_cast<size_t>(kMaxSamples))
    throw InputError("the cuda backend resamples at most " + std::to_string(kMaxSamples) +
                     " samples per microbatch, got " + std::to_string(in.size()));
  Lengths l{};
  l.samples = static_cast<int>(in.size());
  std::copy(in.begin(), in.end(), l.in);
  std::copy(out.begin(), out.end(), l.out);
  return l;
}

}  // namespace

DeviceMatrix resample_forward(const DeviceMatrix& x, const std::vector<int>& in_lengths,
                              const std::vector<int>& out_lengths, cudaStream_t stream) {
  DeviceMatrix out(total(out_lengths), x.cols(), stream);
  if (out.empty()) return out;
  resample_forward_kernel<<<blocks(static_cast<long>(out.size())), kThreads, 0, stream>>>(
      out.rows(), out.cols(), pack(in_lengths, out_lengths), x.data(), out.data());
  LOOM_CUDA_CHECK_LAUNCH("resample_forward_kernel");
  return out;
}

DeviceMatrix resample_backward(const DeviceMatrix& dy, const std::vector<int>& in_lengths,
                               const std::vector<int>& out_lengths, cudaStream_t stream) {
  DeviceMatrix dx(total(in_lengths), dy.cols(), stream);
  if (dx.empty()) return dx;
  resample_backward_kernel<<<blocks(static_cast<long>(dx.size())), kThreads, 0, stream>>>(
      dx.rows(), dx.cols(), pack(in_lengths, out_lengths), dy.data(), dx.data());
  LOOM_CUDA_CHECK_LAUNCH("resample_backward_kernel");
  return dx;
}

DeviceMatrix mse_gradient(const DeviceMatrix& y, const DeviceMatrix& target,
                          const DeviceMatrix& row_scale, cudaStream_t stream) {
  DeviceMatrix dy(y.rows(), y.cols(), stream);
  if (dy.empty()) return dy;
  mse_gradient_kernel<<<blocks(static_cast<long>(dy.size())), kThreads, 0, stream>>>(
      y.rows(), y.cols(), y.data(), target.data(), row_scale.data(), dy.data());
  LOOM_CUDA_CHECK_LAUNCH("mse_gradient_kernel");
  return dy;
}

void adam_step(DeviceMatrix& param, const DeviceMatrix& grad, DeviceMatrix& m, DeviceMatrix& v,
               int step, cudaStream_t stream) {
  if (param.size() != grad.size() || m.size() != param.size() || v.size() != param.size())
    throw std::logic_error("adam_step: parameter, gradient and moments differ in size");
  if (param.empty()) return;
  const float bias1 = 1.0f - std::pow(kAdamBeta1, static_cast<float>(step));
  const float bias2 = 1.0f - std::pow(kAdamBeta2, static_cast<float>(step));
  const long n = static_cast<long>(param.size());
  adam_kernel<<<blocks(n), kThreads, 0, stream>>>(n, bias1, bias2, grad.data(), param.data(),
                                                  m.data(), v.data());
  LOOM_CUDA_CHECK_LAUNCH("adam_kernel");
}

}  // namespace loom::exec::cuda
