// The GPU layer math equals the host's (executor/layer_math.hpp) on the same parameters
// and inputs: forward output, input gradient and accumulated weight gradients, for a
// gated GQA causal transformer layer, a GeLU bidirectional one (head width 80, lanes past
// it idle) and a projector MLP. Tolerance: |gpu - host| <= 1e-4 + 1e-3 |host| (fp32,
// different summation orders). Skips without a GPU.
#include "executor/cuda/layer_cuda.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "executor/layer_math.hpp"
#include "executor/tensor.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"

namespace loom::exec::cuda {
namespace {

Matrix host_random(int rows, int cols, std::uint64_t seed, float scale) {
  Matrix m(rows, cols);
  for (size_t i = 0; i < m.size(); ++i) m.data[i] = scale * hash_uniform(hash_combine(seed, i));
  return m;
}

void expect_close(const std::vector<float>& gpu, const std::vector<float>& host,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), host.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i)
    ASSERT_LE(std::fabs(gpu[i] - host[i]), 1e-4 + 1e-3 * std::fabs(host[i]))
        << what << "[" << i << "]: gpu " << gpu[i] << ", host " << host[i];
}

void compare_layer(const LayerSpec& spec, const std::vector<int>& lengths) {
  int rows = 0;
  for (int t : lengths) rows += t;
  const LayerTensors params = init_parameters(spec, 3, 11);
  const Matrix x = host_random(rows, input_width(spec), 1, 1.0f);
  const Matrix dy = host_random(rows, output_width(spec), 2, 0.1f);
  // Host.
  LayerState hs;
  hs.lengths = lengths;
  const Matrix y = layer_forward(spec, params, x, lengths, &hs);
  const Matrix dx = layer_backward_input(spec, params, hs, dy, lengths, true);
  LayerTensors hg = zero_parameters(spec);
  layer_backward_weight(spec, hs, hg);
  // Device.
  cudaStream_t s = nullptr;
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    kernels::Blas blas(s, false);
    LayerRunner runner(blas, s);
    DeviceTensors dp, dg;
    for (const auto& [name, m] : params) dp[name] = DeviceMatrix::upload(m.rows, m.cols, m.data, s);
    for (const auto& [name, m] : hg) dg[name] = DeviceMatrix::zeros(m.rows, m.cols, s);
    const DeviceMatrix dx_in = DeviceMatrix::upload(rows, x.cols, x.data, s);
    const DeviceMatrix ddy = DeviceMatrix::upload(rows, dy.cols, dy.data, s);
    LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
    DeviceLayerState st;
    const DeviceMatrix gy = runner.forward(spec, dp, dx_in, lengths, st);
    const DeviceMatrix gdx = runner.backward_input(spec, dp, st, ddy, true);
    runner.backward_weight(spec, st, dg);
    expect_close(gy.download(), y.data, "y");
    expect_close(gdx.download(), dx.data, "dx");
    for (const auto& [name, m] : hg) expect_close(dg.at(name).download(), m.data, "d" + name);
  }
  LOOM_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(LayerCuda, MatchesTheHostLayerMath) {
  if (kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  LayerSpec llm;
  llm.hidden = 128;
  llm.ffn = 256;
  llm.heads = 4;
  llm.kv_heads = 2;
  llm.gated_mlp = true;
  llm.causal = true;
  llm.out_hidden = 128;
  compare_layer(llm, {40, 33});  // two packed samples: attention must not cross them
  LayerSpec vit = llm;
  vit.hidden = 160;
  vit.ffn = 320;
  vit.heads = 2;  // head width 80
  vit.kv_heads = 2;
  vit.gated_mlp = false;
  vit.causal = false;
  vit.out_hidden = 160;
  compare_layer(vit, {50});
  LayerSpec projector;
  projector.kind = LayerKind::kMlp;
  projector.hidden = 160;
  projector.ffn = 200;
  projector.out_hidden = 128;
  compare_layer(projector, {20, 9});
}

}  // namespace
}  // namespace loom::exec::cuda
