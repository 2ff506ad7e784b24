#include "executor/cuda/profile_cuda.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "executor/cuda/layer_cuda.hpp"
#include "executor/layer_math.hpp"
#include "executor/tensor.hpp"
#include "kernels/cuda/check.hpp"

namespace loom::exec::cuda {
namespace {

/// Owns the events and the stream of one timing session.
class Timer {
 public:
  Timer() {
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : marks_) LOOM_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Timer() {
    for (cudaEvent_t e : marks_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  cudaStream_t stream() const { return stream_; }
  void mark(int i) { LOOM_CUDA_CHECK(cudaEventRecord(marks_[static_cast<size_t>(i)], stream_)); }
  /// Seconds between marks i and i + 1 (after the stream drained).
  double between(int i) const {
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[static_cast<size_t>(i)],
                                         marks_[static_cast<size_t>(i) + 1]));
    return ms * 1e-3;
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::array<cudaEvent_t, 4> marks_{};
};

DeviceMatrix synthetic(int rows, int cols, std::uint64_t seed, float scale, cudaStream_t s) {
  std::vector<float> host(static_cast<size_t>(rows) * cols);
  for (size_t i = 0; i < host.size(); ++i) host[i] = scale * hash_uniform(hash_combine(seed, i));
  DeviceMatrix m = DeviceMatrix::upload(rows, cols, host, s);
  LOOM_CUDA_CHECK(cudaStreamSynchronize(s));  // `host` goes out of scope
  return m;
}

/// F, I, W medians of one layer at one token count (one sequence of `tokens`): the same
/// inputs as executor/profile.cpp's time_layer.
std::array<double, 3> time_layer(const LayerSpec& spec, int head_dim, int tokens, int repeats,
                                 std::uint64_t seed) {
  Timer timer;
  const cudaStream_t s = timer.stream();
  kernels::Blas blas(s, /*allow_tf32=*/false);
  LayerRunner runner(blas, s, head_dim);
  DeviceTensors params;
  for (const auto& [name, m] : init_parameters(spec, 0, seed, head_dim)) {
    params[name] = DeviceMatrix::upload(m.rows, m.cols, m.data, s);
    LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  const DeviceMatrix x = synthetic(tokens, input_width(spec), seed, 1.0f, s);
  const DeviceMatrix dy = synthetic(tokens, output_width(spec), seed + 1, 1e-3f, s);
  std::array<std::vector<double>, 3> t;
  for (int r = 0; r <= repeats; ++r) {  // r == 0 warms the allocator, cuBLAS and caches
    DeviceLayerState st;
    DeviceTensors grads;
    for (const auto& [name, m] : zero_parameters(spec, head_dim))
      grads[name] = DeviceMatrix::zeros(m.rows, m.cols, s);
    timer.mark(0);
    runner.forward(spec, params, x, {tokens}, st);
    timer.mark(1);
    runner.backward_input(spec, params, st, dy, true);
    timer.mark(2);
    runner.backward_weight(spec, st, grads);
    timer.mark(3);
    LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
    if (r == 0) continue;
    for (int p = 0; p < 3; ++p) t[static_cast<size_t>(p)].push_back(timer.between(p));
  }
  return {median(t[0]), median(t[1]), median(t[2])};
}

}  // namespace

std::vector<ProfileRow> profile_cuda(const Model& model, const Sample& first_sample,
                                     const ProfileRequest& request) {
  return profile_sweep(model, first_sample, request, time_layer);
}

}  // namespace loom::exec::cuda
