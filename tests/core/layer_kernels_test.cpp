#include "core/layer_kernels.hpp"

#include <gtest/gtest.h>

#include <numeric>

#include "core/cost_analytical.hpp"
#include "core/errors.hpp"
#include "gpt_fixture.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::a100_node;
using test::gpt;
using test::gpt_layer;

double sum_flops(const std::vector<Kernel>& ks, KernelPass pass) {
  double f = 0;
  for (const Kernel& k : ks)
    if (k.pass == pass) f += k.flops;
  return f;
}

TEST(LayerKernels, GemmFlopsMatchTheParameterCount) {
  const LayerSpec l = gpt_layer(1024, 16);
  const GpuPerformance gpu(gpu_preset("A100-80GB"), 2);
  const double s = 2048;
  for (int tp : {1, 2, 4}) {
    const auto ks = layer_kernels(l, MicrobatchShape{{2048}}, tp, gpu, {300e9, 2e-6},
                                  LayerKernelOptions{.flash_attention = false});
    // Forward: 2 s x 12 h^2 (linear) + 4 s^2 h (scores and context, unfused: full s x s),
    // per GPU of the TP group.
    const double h = 1024;
    EXPECT_NEAR(sum_flops(ks, KernelPass::kForward), (24 * s * h * h + 4 * s * s * h) / tp, 1e3);
    EXPECT_NEAR(sum_flops(ks, KernelPass::kWeightGrad), 24 * s * h * h / tp, 1e3);
    EXPECT_NEAR(sum_flops(ks, KernelPass::kInputGrad), (24 * s * h * h + 8 * s * s * h) / tp, 1e3);
  }
}

TEST(LayerKernels, AModulesOwnRecomputeSeparatesLayersOfOneShape) {
  // Two modules of identical layers (equal shapes share one cached cost class), the
  // encoder set to full recompute and the LLM following cost.recompute = none.
  Module vision = test::tiny_module("vision", ModuleKind::kEncoder, 2, false);
  for (LayerSpec& l : vision.layers) l.recompute = Recompute::kFull;
  const Model model({vision, test::tiny_module("llm", ModuleKind::kLlm, 2, false, {"vision"})});
  const AnalyticalCostModel cost(model, a100_node(), AnalyticalOptions{});
  ASSERT_TRUE(cost.kernel_level());
  const MicrobatchShape shape{{4096}};
  const PassCost full = cost.layer_cost(0, shape, 1), none = cost.layer_cost(2, shape, 1);
  EXPECT_DOUBLE_EQ(full.input_grad_s, none.input_grad_s + none.forward_s);  // re-run forward
  EXPECT_DOUBLE_EQ(full.forward_s, none.forward_s);
  EXPECT_DOUBLE_EQ(cost.activation_bytes(0, shape, 1), 4096.0 * 64 * 2);  // the input only
  EXPECT_GT(cost.activation_bytes(2, shape, 1), 10 * cost.activation_bytes(0, shape, 1));
  EXPECT_EQ(cost.describe()["module_recompute"]["vision"], "full");
}

TEST(LayerKernels, VocabularyOnTheFirstAndLastLayerOnly) {
  const Model model = gpt(3, 1024, 16, 51200);
  AnalyticalCostModel cost(model, a100_node(), AnalyticalOptions{});
  auto names = [&](int layer) {
    std::string all;
    for (const Kernel& k : cost.kernels(layer, MicrobatchShape{{1024}}, 1)) all += k.name + ";";
    return all;
  };
  EXPECT_NE(names(0).find("embedding"), std::string::npos);
  EXPECT_EQ(names(0).find("lm head"), std::string::npos);
  EXPECT_EQ(names(1).find("embedding"), std::string::npos);
  EXPECT_NE(names(2).find("lm head"), std::string::npos);
  EXPECT_NE(names(2).find("cross-entropy"), std::string::npos);
  EXPECT_DOUBLE_EQ(cost.parameters(0) - cost.parameters(1), 51200.0 * 1024);
  EXPECT_GT(cost.layer_cost(2, MicrobatchShape{{1024}}, 1).forward_s,
            cost.layer_cost(1, MicrobatchShape{{1024}}, 1).forward_s);
}

TEST(LayerKernels, GradientAccumulationFusionAddsInsideTheWgradGemms) {
  // A GPT layer (h 1024, f 4h) with an fp32 gradient buffer: unfused, one kernel per
  // microbatch adds the layer's weight gradient into it (read the gradient, read and write
  // the buffer); fused (Megatron-Core's gradient_accumulation_fusion), each wgrad GEMM
  // reads and writes the fp32 buffer as its output and no kernel is left but the
  // embedding's.
  const LayerSpec l = gpt_layer(1024, 16);
  const GpuPerformance gpu(gpu_preset("A100-80GB"), 2);
  const MicrobatchShape shape{{2048}};
  const LinkSpec link{300e9, 2e-6};
  const LayerKernelOptions plain{.gradient_bytes = 4};
  LayerKernelOptions fusion = plain;
  fusion.gradient_accumulation_fusion = true;
  const auto unfused = layer_kernels(l, shape, 1, gpu, link, plain);
  const auto fused = layer_kernels(l, shape, 1, gpu, link, fusion);
  const double h = 1024, params = 12 * h * h;  // its weights (layer_parameters)
  EXPECT_DOUBLE_EQ(test::find_kernel(unfused, "weight-gradient accumulation").bytes,
                   params * (2 + 2 * 4));
  for (const Kernel& k : fused) EXPECT_NE(k.name, "weight-gradient accumulation");
  // fc1's wgrad: its [h x 4h] output read and written in fp32 instead of written in bf16.
  const Kernel& a = test::find_kernel(unfused, "mlp fc1 wgrad");
  const Kernel& b = test::find_kernel(fused, "mlp fc1 wgrad");
  EXPECT_DOUBLE_EQ(b.bytes - a.bytes, h * 4 * h * (8 - 2));
  EXPECT_DOUBLE_EQ(b.flops, a.flops);
  EXPECT_GE(b.seconds, a.seconds);
  double w_unfused = 0, w_fused = 0;
  for (const Kernel& k : unfused) w_unfused += k.pass == KernelPass::kWeightGrad ? k.seconds : 0;
  for (const Kernel& k : fused) w_fused += k.pass == KernelPass::kWeightGrad ? k.seconds : 0;
  EXPECT_LT(w_fused, w_unfused);
  // The embedding's gradient is a scatter, not a GEMM: still added apart.
  LayerKernelOptions first = fusion;
  first.vocab_in = 51200;
  EXPECT_DOUBLE_EQ(test::find_kernel(layer_kernels(l, shape, 1, gpu, link, first),
                                     "weight-gradient accumulation")
                       .bytes,
                   51200 * h * (2 + 2 * 4));
}

TEST(ActivationMemory, KorthikantiClosedFormsByHand) {
  // h 64, 4 heads, f 256, s 128, tp 2, fp16: Table 2 of Korthikanti et al. 2022 per layer.
  const LayerSpec l = [] {
    LayerSpec x = gpt_layer(64, 4);
    return x;
  }();
  const MicrobatchShape shape{{128}};
  const double s = 128, h = 64, a = 4, t = 2;
  auto bytes = [&](bool flash, bool sp, Recompute r) {
    return transformer_activation_bytes(l, shape, 2, flash, sp, r);
  };
  EXPECT_DOUBLE_EQ(bytes(false, false, Recompute::kNone),
                   s * h * (10 + 24 / t + 5 * a * s / (h * t)));
  EXPECT_DOUBLE_EQ(bytes(false, true, Recompute::kNone), s * h * (34 / t + 5 * a * s / (h * t)));
  EXPECT_DOUBLE_EQ(bytes(false, false, Recompute::kSelective), s * h * (10 + 24 / t));
  EXPECT_DOUBLE_EQ(bytes(false, true, Recompute::kSelective), s * h * 34 / t);
  EXPECT_DOUBLE_EQ(bytes(false, false, Recompute::kFull), s * h * 2);
  EXPECT_DOUBLE_EQ(bytes(false, true, Recompute::kFull), s * h * 2 / t);
  // FlashAttention keeps no s x s scores.
  EXPECT_DOUBLE_EQ(bytes(true, false, Recompute::kNone), s * h * (10 + 24 / t));
}

TEST(Recompute, SelectiveCostsLessTimeThanFullAndLessMemoryThanNone) {
  const Model model = gpt(2, 4096, 32, 0);
  const MicrobatchShape shape{{2048}};
  auto model_with = [&](Recompute r) {
    return AnalyticalCostModel(model, a100_node(),
                               AnalyticalOptions{.flash_attention = false, .recompute = r});
  };
  const auto none = model_with(Recompute::kNone);
  const auto selective = model_with(Recompute::kSelective);
  const auto full = model_with(Recompute::kFull);
  const double t_none = none.layer_cost(0, shape, 4).backward_s();
  const double t_sel = selective.layer_cost(0, shape, 4).backward_s();
  const double t_full = full.layer_cost(0, shape, 4).backward_s();
  EXPECT_LT(t_none, t_sel);
  EXPECT_LT(t_sel, t_full);
  EXPECT_LT(selective.activation_bytes(0, shape, 4), none.activation_bytes(0, shape, 4));
  EXPECT_LT(full.activation_bytes(0, shape, 4), selective.activation_bytes(0, shape, 4));
}

TEST(SequenceParallel, SameCommunicationTimeLessNormTime) {
  const Model model = gpt(1, 4096, 32, 0);
  const MicrobatchShape shape{{2048}};
  const AnalyticalCostModel plain(model, a100_node(), AnalyticalOptions{});
  const AnalyticalCostModel sp(model, a100_node(), AnalyticalOptions{.sequence_parallel = true});
  auto seconds = [&](const AnalyticalCostModel& cost, KernelBound bound) {
    double total = 0;
    for (const Kernel& k : cost.kernels(0, shape, 4))
      if (k.bound == bound) total += k.seconds;
    return total;
  };
  const double comm_plain = seconds(plain, KernelBound::kCommunication);
  const double comm_sp = seconds(sp, KernelBound::kCommunication);
  const double mem_plain = seconds(plain, KernelBound::kMemory);
  const double mem_sp = seconds(sp, KernelBound::kMemory);
  // Reduce-scatter + all-gather move what one all-reduce moves (Korthikanti et al. §4.2.2).
  EXPECT_DOUBLE_EQ(comm_plain, comm_sp);
  EXPECT_LT(mem_sp, mem_plain);
}

TEST(AnalyticalCost, KernelLevelIsCachedPerShape) {
  const Model model = gpt(4, 1024, 16, 0);
  const AnalyticalCostModel cost(model, a100_node(), AnalyticalOptions{});
  const PassCost a = cost.layer_cost(1, MicrobatchShape{{512}}, 1);
  const PassCost b = cost.layer_cost(2, MicrobatchShape{{512}}, 1);  // same class: cache hit
  EXPECT_EQ(a.forward_s, b.forward_s);
  EXPECT_EQ(a.input_grad_s, b.input_grad_s);
}

}  // namespace
}  // namespace loom
