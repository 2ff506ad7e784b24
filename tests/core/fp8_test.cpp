// FP8 training (cost.fp8): the linear layers' GEMMs at the FP8 tensor peak through the same
// kernel-level model, their casts as memory-bound kernels with the bytes each recipe moves,
// the FP8 weight copies in memory, and a clear error where a GPU has no FP8.
#include <gtest/gtest.h>

#include <string>

#include "app/study.hpp"
#include "core/config.hpp"
#include "core/cost_analytical.hpp"
#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/layer_kernels.hpp"
#include "core/memory_model.hpp"
#include "gpt_fixture.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

const Kernel& find(const std::vector<Kernel>& ks, const std::string& name) {
  return test::find_kernel(ks, name);
}

std::vector<Kernel> kernels(Fp8Recipe recipe, int microbatches = 1) {
  const LayerSpec l = test::gpt_layer(8192, 64);
  const GpuPerformance gpu(gpu_preset("H100"), 2);
  return layer_kernels(l, MicrobatchShape{{8192}}, 1, gpu, {450e9, 2e-6},
                       LayerKernelOptions{.fp8 = recipe, .microbatches = microbatches});
}

TEST(Fp8, LargeGemmsRunAtTheFp8PeakAndItsSustainedFraction) {
  // Hopper's FP8 peak is twice its BF16 peak (H100 datasheet: 3,958 vs 1,979 TFLOP/s
  // with sparsity); the tile and wave model is the same, at the fraction each precision
  // sustains (0.62 FP8, 0.70 BF16, measured: docs/gpu-validation.md, 2026-12-04), so a
  // large compute-bound GEMM takes 0.70 / (2 x 0.62) of its BF16 time, less the launch.
  const auto bf16 = kernels(Fp8Recipe::kOff);
  const auto fp8 = kernels(Fp8Recipe::kDelayed);
  for (const char* gemm : {"mlp fc1", "mlp fc1 dgrad", "mlp fc1 wgrad", "qkv"}) {
    const double b = find(bf16, gemm).seconds - 4e-6, f = find(fp8, gemm).seconds - 4e-6;
    EXPECT_NEAR(f / b, 0.70 / (2 * 0.62), 1e-9) << gemm;
    EXPECT_EQ(find(bf16, gemm).flops, find(fp8, gemm).flops) << gemm;
  }
  // Attention stays in BF16.
  EXPECT_EQ(find(bf16, "flash attention").seconds, find(fp8, "flash attention").seconds);
}

TEST(Fp8, CastsMoveTheBytesOfTheirRecipe) {
  // x [8192 tokens x 8192] into fc1: read bf16 (2 bytes), write FP8 and its transpose (1 + 1).
  const double elements = 8192.0 * 8192;
  EXPECT_DOUBLE_EQ(find(kernels(Fp8Recipe::kDelayed), "mlp fc1 fp8 cast").bytes, 4 * elements);
  // Current scaling reads the tensor once more for its amax.
  EXPECT_DOUBLE_EQ(find(kernels(Fp8Recipe::kCurrent), "mlp fc1 fp8 cast").bytes, 6 * elements);
  // MX writes one scale byte per 32 elements of each of the two copies.
  EXPECT_DOUBLE_EQ(find(kernels(Fp8Recipe::kMx), "mlp fc1 fp8 cast").bytes,
                   4 * elements + 2 * elements / 32);
  // The weight's cast runs once per step: each of 16 microbatches carries a 16th.
  EXPECT_DOUBLE_EQ(find(kernels(Fp8Recipe::kDelayed, 16), "qkv weight fp8 cast").bytes,
                   find(kernels(Fp8Recipe::kDelayed, 1), "qkv weight fp8 cast").bytes / 16);
  // None without FP8.
  for (const Kernel& k : kernels(Fp8Recipe::kOff))
    EXPECT_EQ(k.name.find("fp8"), std::string::npos) << k.name;
}

TEST(Fp8, TheLayerHoldsFp8CopiesOfItsLinearWeights) {
  const Model model = test::gpt(2, 1024, 16);
  const AnalyticalCostModel cost(model, test::a100_node(), AnalyticalOptions{});
  MemoryConstants memory;
  const StaticMemory bf16 = layer_state_bytes(cost, model, 1, 2, memory, 1);
  memory.fp8_weight_bytes_per_param = 2;
  const StaticMemory fp8 = layer_state_bytes(cost, model, 1, 2, memory, 1);
  EXPECT_DOUBLE_EQ(fp8.parameters - bf16.parameters, layer_parameters(model.layer(1)) / 2 * 2);
  EXPECT_EQ(fp8.optimizer, bf16.optimizer);
}

TEST(Fp8, LinearInputsAreKeptInFp8) {
  // Korthikanti's terms, fp16 units per token: the QKV and fc1 inputs (2h each, outside the
  // TP region) and the output projection's (2h) and fc2's (2f, inside it) at one byte.
  const LayerSpec l = test::gpt_layer(1024, 16);  // f = 4h, not gated, MHA
  const MicrobatchShape shape{{2048}};
  const double h = 1024, f = 4096, T = 2048, t = 2;
  const double bf16 = transformer_activation_bytes(l, shape, 2, true, false, Recompute::kNone);
  const double fp8 = transformer_activation_bytes(l, shape, 2, true, false, Recompute::kNone, true);
  EXPECT_DOUBLE_EQ(bf16 - fp8, T * ((2 * h + 2 * h) / 2 + (2 * h + 2 * f) / 2 / t));
  // A MoE layer's fc1 slot is the bf16 router's input: only the QKV input halves outside
  // the TP region; inside, the output projection's input and each of the top 2 routed
  // copies' fc1 input (2h) and fc2 input (2 f_e).
  LayerSpec moe = l;
  moe.experts = 8;
  moe.top_k = 2;
  moe.expert_ffn = 512;
  const double fe = 512;
  EXPECT_DOUBLE_EQ(
      transformer_activation_bytes(moe, shape, 2, true, false, Recompute::kNone) -
          transformer_activation_bytes(moe, shape, 2, true, false, Recompute::kNone, true),
      T * (2 * h / 2 + (2 * h + 2 * (2 * h + 2 * fe)) / 2 / t));
  // Full recompute keeps the layer input only, in bf16.
  EXPECT_DOUBLE_EQ(transformer_activation_bytes(l, shape, 2, true, false, Recompute::kFull, true),
                   transformer_activation_bytes(l, shape, 2, true, false, Recompute::kFull));
}

TEST(Fp8, AGpuWithoutFp8TensorCoresIsAnInputErrorNamingTheKey) {
  // A Narayanan run: the kernel-level model on A100s.
  const std::string config = test::source_path("validation/megatron-narayanan-2021/n1-1.7b.toml");
  try {
    load_config(config, {"cost.fp8=current"});
    FAIL() << "A100 has no FP8";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cost.fp8"), std::string::npos) << what;
    EXPECT_NE(what.find("'A100-80GB' has no FP8 tensor cores"), std::string::npos) << what;
    EXPECT_NE(what.find("cost.fp8 = \"off\""), std::string::npos) << what;
  }
  const Config h100 = load_config(config, {"cost.fp8=current", "cluster.gpu=H100"});
  EXPECT_EQ(h100.cost.fp8, Fp8Recipe::kCurrent);
  EXPECT_EQ(h100.cost.memory.fp8_weight_bytes_per_param, 2);
  // The table and fixed-fraction models have no GEMMs to price in FP8.
  try {
    load_config(test::source_path("configs/examples/uniform-1f1b.toml"),
                {"cost.fp8=delayed", "cluster.gpu=H100"});
    FAIL() << "a table cost model cannot take FP8";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel-level model"), std::string::npos) << e.what();
  }
}

TEST(Attention, Flash2PricesFlashAttention2AndBlackwellHasNoFigureForIt) {
  // "flash" is the fused attention Transformer Engine runs (cuDNN's on Hopper, 0.55 / 0.48
  // of the peak measured); "flash2" FlashAttention-2's (0.31 / 0.29 measured on the same
  // H200, docs/gpu-validation.md, 2026-12-04): the same kernel list, 0.55 / 0.31 slower.
  const std::string config =
      test::source_path("validation/megatron-bridge-2511/llama3-70b-h100.toml");
  const Config fused = load_config(config, {});
  const Config fa2 = load_config(config, {"cost.attention=flash2"});
  EXPECT_TRUE(fa2.cost.flash_attention);
  const double flops = 1e15, blocks = 100.0 * 132;
  const auto seconds = [&](const Config& c) {
    return GpuPerformance(c.cluster.gpu, 2).flash_attention_seconds(flops, blocks, false) - 4e-6;
  };
  EXPECT_NEAR(seconds(fa2) / seconds(fused), 0.55 / 0.31, 1e-9);
  try {
    load_config(config, {"cost.attention=flash2", "cluster.gpu=B200"});
    FAIL() << "no FlashAttention-2 figure for B200";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cost.attention"), std::string::npos) << what;
    EXPECT_NE(what.find("no FlashAttention-2 figure for cluster.gpu 'B200'"), std::string::npos)
        << what;
  }
}

TEST(Fp8, CurrentScalingKeepsTheLanguageModelsEdgeLayersInBf16) {
  // Megatron-Bridge's current-scaling recipe: num_layers_at_start/end_in_bf16 = 1.
  const std::string config =
      test::source_path("validation/megatron-bridge-2511/llama3-8b-h100.toml");
  const Config c = load_config(config, {});
  EXPECT_EQ(c.cost.fp8_bf16_layers, 1);
  const auto cost = make_cost_model(c);
  const MicrobatchShape shape{{8192}};
  const double first = cost->layer_cost(0, shape, 1).forward_s;
  const double second = cost->layer_cost(1, shape, 1).forward_s;
  const double middle = cost->layer_cost(15, shape, 1).forward_s;
  const int last_layer = c.model.num_layers() - 1;
  EXPECT_DOUBLE_EQ(second, middle) << "FP8 inside";
  EXPECT_GT(first, 1.3 * middle) << "BF16 GEMMs (and the embedding) on the first layer";
  EXPECT_GT(cost->layer_cost(last_layer, shape, 1).forward_s,
            cost->layer_cost(last_layer - 1, shape, 1).forward_s * 1.3);
  // None kept in BF16: the first layer costs a middle one plus its embedding.
  const Config none = load_config(config, {"cost.fp8_bf16_layers=0"});
  const auto all_fp8 = make_cost_model(none);  // holds references into `none`
  EXPECT_LT(all_fp8->layer_cost(0, shape, 1).forward_s, first);
  EXPECT_DOUBLE_EQ(all_fp8->layer_cost(15, shape, 1).forward_s, middle);
  // Delayed and MX recipes keep none; the key needs FP8.
  EXPECT_EQ(load_config(config, {"cost.fp8=delayed"}).cost.fp8_bf16_layers, 0);
  EXPECT_NE(test::input_error([&] {
              load_config(config, {"cost.fp8=off", "cost.fp8_bf16_layers=1"});
            }).find("cost.fp8_bf16_layers"),
            std::string::npos);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(Blackwell, AGb200Nvl72RackIsOneSeventyTwoGpuNvlinkDomain) {
  // Narayanan's 145.6B GPT on one NVL72 rack: TP 8 x PP 8 inside the NVLink domain, FP8 (MX).
  const std::string config = test::source_path("validation/megatron-narayanan-2021/n1-145.6b.toml");
  const auto study =
      prepare_study(config, {"cluster.gpu=GB200", "cluster.nodes=1", "cluster.gpus_per_node=72",
                             "cluster.intra_node.preset=nvlink5", "parallel.dp=1", "parallel.pp=8",
                             "parallel.tp=8", "cost.fp8=mx"});
  EXPECT_EQ(study->config.cluster.gpu.name, "GB200");
  const Timeline timeline = evaluate(study->schedule, study->config.cluster);
  EXPECT_GT(timeline.iteration_time_s(), 0);
  // Every message between stages stays on NVLink: one node.
  EXPECT_EQ(study->config.cluster.node_of(71), 0);
}

}  // namespace
}  // namespace loom
