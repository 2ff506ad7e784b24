// Sliding-window attention and attention sinks (GPT-OSS): the attended pairs in closed form,
// the alternating layers a config gives, what they change in FLOPs and kernel time, the
// published GPT-OSS 120B counts, and the inputs refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/cost_analytical.hpp"
#include "core/layer_kernels.hpp"
#include "core/model_flops.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::string gpt_oss(const std::string& gpu) {
  return test::source_path("validation/megatron-bridge-2511/gpt-oss-120b-" + gpu + ".toml");
}

TEST(AttentionWindow, AttendedPairsHaveTheirClosedForms) {
  LayerSpec l;
  l.causal = true;
  EXPECT_DOUBLE_EQ(l.attended_pairs(4096), 0.5 * 4096.0 * 4096);
  l.sliding_window = 128;
  // A window wider than the sequence changes nothing; a narrower one keeps w s - w^2 / 2.
  EXPECT_DOUBLE_EQ(l.attended_pairs(100), 0.5 * 100 * 100);
  EXPECT_DOUBLE_EQ(l.attended_pairs(128), 0.5 * 128 * 128);
  EXPECT_DOUBLE_EQ(l.attended_pairs(4096), 128.0 * 4096 - 0.5 * 128 * 128);
  l.causal = false;
  l.sliding_window = 0;
  EXPECT_DOUBLE_EQ(l.attended_pairs(4096), 4096.0 * 4096);
}

TEST(AttentionWindow, GptOssAlternatesWindowedAndFullLayers) {
  const Config c = load_config(gpt_oss("h100"), {});
  ASSERT_EQ(c.model.num_layers(), 36);
  for (int l = 0; l < 36; ++l) {
    // The model card: the first layer banded, the second dense, and so on.
    EXPECT_EQ(c.model.layer(l).sliding_window, l % 2 == 0 ? 128 : 0) << "layer " << l;
    EXPECT_TRUE(c.model.layer(l).attention_sinks);
  }
  // No full_attention_every: every layer windowed.
  const Config all = load_config(gpt_oss("h100"), {"model.modules.gpt-oss.full_attention_every=0"});
  for (int l = 0; l < 36; ++l) EXPECT_EQ(all.model.layer(l).sliding_window, 128);
}

TEST(AttentionWindow, GptOssHasItsPublishedParameterCounts) {
  // gpt-oss model card (OpenAI 2025), Table 1: 116.83B parameters in total, 5.13B active per
  // token (the embedding table not counted as active). Loom leaves out the biases and norms
  // (about 0.04B).
  const Config c = load_config(gpt_oss("b200"), {});
  const auto cost = make_cost_model(c);
  double total = 0, active = 0, embedding = 0;
  for (int l = 0; l < c.model.num_layers(); ++l) {
    const LayerSpec& s = c.model.layer(l);
    total += cost->parameters(l);
    active += cost->parameters(l) - expert_parameters(s) * (1 - double(s.top_k) / s.experts);
    embedding += cost->embedding_parameters(l);
  }
  EXPECT_NEAR(total / 1e9, 116.83, 0.06);
  EXPECT_NEAR((active - embedding) / 1e9, 5.13, 0.01);
  // 64 sinks per layer.
  LayerSpec without = c.model.layer(0);
  without.attention_sinks = false;
  EXPECT_DOUBLE_EQ(layer_parameters(c.model.layer(0)) - layer_parameters(without), 64);
}

TEST(AttentionWindow, ModelFlopsCountOnlyThePairsTheWindowKeeps) {
  const Config c = load_config(gpt_oss("b200"), {});
  const MicrobatchShape shape{{4096}};
  const LayerSpec& windowed = c.model.layer(0);
  const LayerSpec& full = c.model.layer(1);
  // Per sequence: 2 x pairs x heads x (64 + 64).
  EXPECT_DOUBLE_EQ(attention_core_flops(full, shape), 2 * 0.5 * 4096.0 * 4096 * 64 * 128);
  EXPECT_DOUBLE_EQ(attention_core_flops(windowed, shape),
                   2 * (128.0 * 4096 - 0.5 * 128 * 128) * 64 * 128);
  // The two layers differ in nothing else.
  EXPECT_DOUBLE_EQ(layer_forward_flops(c.model, 1, shape) - layer_forward_flops(c.model, 0, shape),
                   attention_core_flops(full, shape) - attention_core_flops(windowed, shape));
  // Per token over the model (x3 for training): projections 26.54M, four SwiGLU experts
  // 99.53M, the attention pairs averaged over the two kinds of layer, and the LM head:
  // 32.63 GFLOP. Megatron-Bridge's published 153 TFLOP/s at 5630 tokens/s is 27.16 GFLOP per
  // token: its count prices the experts as two matrices (its gated multiplier follows
  // SwiGLU, and GPT-OSS's activation is a clamped gated SiLU it does not call that) and
  // every layer's attention as full causal (docs/moe.md).
  double per_token = 0;
  for (int l = 0; l < c.model.num_layers(); ++l)
    per_token += training_flops_multiplier(c.model, l) * layer_forward_flops(c.model, l, shape);
  per_token /= 4096;
  const double projections = 2880.0 * (4096 + 2 * 512) + 4096.0 * 2880;
  const double experts = 4 * 3 * 2880.0 * 2880;
  const double pairs_per_token = (0.5 * 4096 + (128 - 0.5 * 128 * 128 / 4096)) / 2;
  const double attention = 2 * pairs_per_token * 64 * 128;
  const double expected =
      3 * (36 * (2 * (projections + experts) + attention) + 2 * 2880.0 * 201088);
  EXPECT_NEAR(per_token, expected, expected * 1e-12);
  EXPECT_NEAR(per_token / 1e9, 32.63, 0.01);
}

TEST(AttentionWindow, AWindowShortensFusedAttentionAndNothingElse) {
  const Config c = load_config(gpt_oss("b200"), {});
  const GpuPerformance gpu(c.cluster.gpu, 2);
  auto kernels = [&](int layer) {
    return layer_kernels(c.model.layer(layer), MicrobatchShape{{4096}}, 1, gpu,
                         c.cluster.intra_node, LayerKernelOptions{.expert_parallel = 8});
  };
  const std::vector<Kernel> windowed = kernels(0), full = kernels(1);
  ASSERT_EQ(windowed.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    if (full[i].name.rfind("flash attention", 0) == 0) {
      EXPECT_LT(windowed[i].seconds, 0.2 * full[i].seconds) << full[i].name;
      EXPECT_LT(windowed[i].flops, 0.07 * full[i].flops) << full[i].name;
    } else {
      EXPECT_DOUBLE_EQ(windowed[i].seconds, full[i].seconds) << full[i].name;
    }
  }
}

TEST(AttentionWindow, BadKeysAreInputErrorsNamingTheKeyAndTheFix) {
  auto error = [](const std::string& file, std::vector<std::string> overrides) {
    return test::input_error([&] { load_config(file, overrides); });
  };
  const std::string dense = test::source_path("configs/examples/uniform-1f1b.toml");
  EXPECT_NE(error(dense, {"model.modules.llm.full_attention_every=2"}).find("set sliding_window"),
            std::string::npos);
  EXPECT_NE(error(dense, {"model.modules.llm.sliding_window=64", "model.modules.llm.causal=false"})
                .find("causal attention only"),
            std::string::npos);
  EXPECT_NE(error(dense, {"model.modules.llm.sliding_window=0"}).find("sliding_window"),
            std::string::npos);
  EXPECT_NE(error(gpt_oss("h100"), {"parallel.cp=2", "parallel.dp=8"})
                .find("a sliding window's K/V exchange (sliding_window) is not modelled yet"),
            std::string::npos);
}

}  // namespace
}  // namespace loom
