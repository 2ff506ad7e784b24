// Selective recompute by submodule (cost.recompute_modules, Megatron-Core's recompute_modules):
// what each drops from a layer's saved activations, in closed form, and what it re-runs
// before the backward, kernel by kernel; the config's rules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/study.hpp"
#include "core/config.hpp"
#include "core/cost_analytical.hpp"
#include "core/errors.hpp"
#include "core/layer_kernels.hpp"
#include "gpt_fixture.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

RecomputeModules modules(std::initializer_list<RecomputeModule> list) {
  RecomputeModules m = RecomputeModules::none();
  for (const RecomputeModule x : list) m.add(x);
  return m;
}

/// GPT-OSS-like: 128 experts of 2,880, top 4, SwiGLU (its model card, Table 1).
LayerSpec moe_layer() {
  LayerSpec l = test::gpt_layer(2880, 64);
  l.gated_mlp = true;
  l.experts = 128;
  l.top_k = 4;
  l.expert_ffn = 2880;
  return l;
}

double saved(const LayerSpec& l, RecomputeModules m, int tp = 1, bool sp = false, bool fp8 = false,
             bool flash = true) {
  return transformer_activation_bytes(l, MicrobatchShape{{4096}}, tp, flash, sp,
                                      Recompute::kSelective, fp8, m);
}

TEST(RecomputeModules, EachDropsWhatMegatronDiscards) {
  const double T = 4096, h = 2880, fe = 2880;
  const LayerSpec moe = moe_layer();
  const RecomputeModules core = modules({RecomputeModule::kCoreAttention});
  // layernorm: the pre-MLP norm's output, the router's input (a module of its own before a
  // router); 1/tp of it under sequence parallelism.
  EXPECT_DOUBLE_EQ(saved(moe, core) - saved(moe, modules({RecomputeModule::kCoreAttention,
                                                          RecomputeModule::kLayerNorm})),
                   T * 2 * h);
  EXPECT_DOUBLE_EQ(
      saved(moe, core, 4, true) -
          saved(moe, modules({RecomputeModule::kCoreAttention, RecomputeModule::kLayerNorm}), 4,
                true),
      T * 2 * h / 4);
  // moe_act: each routed copy's activation output (fc2's input), inside the TP region.
  EXPECT_DOUBLE_EQ(
      saved(moe, core, 2) -
          saved(moe, modules({RecomputeModule::kCoreAttention, RecomputeModule::kMoeActivation}),
                2),
      T * 4 * 2 * fe / 2);
  // Under FP8 fc2 keeps its FP8 copy, which output-discarding does not touch.
  EXPECT_DOUBLE_EQ(
      saved(moe, core, 1, false, true),
      saved(moe, modules({RecomputeModule::kCoreAttention, RecomputeModule::kMoeActivation}), 1,
            false, true));
  // Under FP8 the router still keeps the norm's bf16 output, which layernorm discards.
  EXPECT_DOUBLE_EQ(
      saved(moe, core, 1, false, true) -
          saved(moe, modules({RecomputeModule::kCoreAttention, RecomputeModule::kLayerNorm}), 1,
                false, true),
      T * 2 * h);
  // mlp is a dense MLP's: nothing in a MoE layer.
  EXPECT_DOUBLE_EQ(saved(moe, core),
                   saved(moe, modules({RecomputeModule::kCoreAttention, RecomputeModule::kMlp})));
}

TEST(RecomputeModules, DenseLayersFuseTheirNormsAndDropTheWholeMlp) {
  const LayerSpec dense = test::gpt_layer(1024, 16);  // f = 4h, not gated
  const double T = 4096, h = 1024, f = 4096, t = 2;
  const RecomputeModules core = modules({RecomputeModule::kCoreAttention});
  // TE fuses both norms into the linears after them: layernorm has nothing to discard.
  EXPECT_DOUBLE_EQ(
      saved(dense, core, 2),
      saved(dense, modules({RecomputeModule::kCoreAttention, RecomputeModule::kLayerNorm}), 2));
  // mlp: fc1's input (2h, replicated) and fc1's and the GeLU's outputs (2f each, per TP).
  EXPECT_DOUBLE_EQ(
      saved(dense, core, 2) -
          saved(dense, modules({RecomputeModule::kCoreAttention, RecomputeModule::kMlp}), 2),
      T * (2 * h + (2 * f + 2 * f) / t));
  // Under FP8 fc1's input is its FP8 copy (h) and fc2's input (the activation's output)
  // is one too (f): what mlp drops shrinks by as much.
  EXPECT_DOUBLE_EQ(
      saved(dense, core, 2, false, true) -
          saved(dense, modules({RecomputeModule::kCoreAttention, RecomputeModule::kMlp}), 2, false,
                true),
      T * (h + (2 * f + f) / t));
  // Without core_attn, unfused attention keeps its 5 a s^2 / t again.
  const double s = 4096, a = 16;
  EXPECT_DOUBLE_EQ(saved(dense, RecomputeModules::none(), 2, false, false, false) -
                       saved(dense, core, 2, false, false, false),
                   5 * a * s * s / t);
  // Megatron's default list is core_attn: the selective recompute Loom always had.
  EXPECT_EQ(RecomputeModules{}, core);
}

/// DeepSeek-V3's attention widths (its config.json), on a dense layer.
LayerSpec mla_layer() {
  LayerSpec mla = test::gpt_layer(7168, 128);
  mla.head_dim = 128;
  mla.q_lora_rank = 1536;
  mla.kv_lora_rank = 512;
  mla.qk_rope_head_dim = 64;
  mla.v_head_dim = 128;
  return mla;
}

TEST(RecomputeModules, MlaInputNormIsDiscardedUnlessFp8DownProjectionsKeepTheirCopies) {
  // layernorm is the input norm's output only, the down projections' input.
  const LayerSpec mla = mla_layer();
  const double T = 4096, h = 7168;
  const RecomputeModules core = modules({RecomputeModule::kCoreAttention});
  const RecomputeModules norms =
      modules({RecomputeModule::kCoreAttention, RecomputeModule::kLayerNorm});
  EXPECT_DOUBLE_EQ(saved(mla, core) - saved(mla, norms), T * 2 * h);
  EXPECT_DOUBLE_EQ(saved(mla, core, 1, false, true), saved(mla, norms, 1, false, true));
}

TEST(RecomputeModules, MlaUpProjDropsTheCoreAttentionsQueryKeyAndValue) {
  // The up projections' outputs after RoPE: Q at the score head width (nope + rope), K at
  // it and V at the value width, per head, inside the TP region; BF16 under FP8 too (the
  // attention stays BF16). The latents the up projections read stay.
  const LayerSpec mla = mla_layer();
  const double T = 4096, heads = 128, t = 2;
  const double q = heads * mla.score_head_dim();
  const double k_and_v = heads * (mla.score_head_dim() + mla.value_head_dim());
  const RecomputeModules core = modules({RecomputeModule::kCoreAttention});
  const RecomputeModules up =
      modules({RecomputeModule::kCoreAttention, RecomputeModule::kMlaUpProjection});
  for (const bool fp8 : {false, true}) {
    EXPECT_DOUBLE_EQ(saved(mla, core, 2, true, fp8) - saved(mla, up, 2, true, fp8),
                     T * (2 * q + 2 * k_and_v) / t)
        << "fp8 " << fp8;
  }
  // Nothing to drop in a layer without MLA.
  const LayerSpec gqa = test::gpt_layer(4096, 32);
  EXPECT_DOUBLE_EQ(saved(gqa, core, 2), saved(gqa, up, 2));
}

/// A model of one module, "llm", of the one layer.
Model one_layer(const LayerSpec& layer) {
  Module m;
  m.name = "llm";
  m.layers = {layer};
  return Model({m});
}

double input_grad(const Model& model, Recompute recompute, RecomputeModules m) {
  const AnalyticalCostModel cost(model, test::a100_node(),
                                 AnalyticalOptions{.recompute = recompute, .recompute_modules = m});
  return cost.layer_cost(0, MicrobatchShape{{4096}}, 1).input_grad_s;
}

TEST(RecomputeModules, TheBackwardRerunsExactlyTheListedKernels) {
  const Model model = one_layer(moe_layer());
  const AnalyticalCostModel plain(model, test::a100_node(), AnalyticalOptions{});
  const std::vector<Kernel> ks = plain.kernels(0, MicrobatchShape{{4096}}, 1);
  const double none = input_grad(model, Recompute::kSelective, RecomputeModules::none());
  EXPECT_DOUBLE_EQ(none, input_grad(model, Recompute::kNone, {}));
  EXPECT_DOUBLE_EQ(input_grad(model, Recompute::kSelective, modules({RecomputeModule::kLayerNorm})),
                   none + test::find_kernel(ks, "layernorm 2").seconds);
  EXPECT_DOUBLE_EQ(
      input_grad(model, Recompute::kSelective, modules({RecomputeModule::kMoeActivation})),
      none + test::find_kernel(ks, "experts swiglu").seconds);
  EXPECT_DOUBLE_EQ(
      input_grad(model, Recompute::kSelective, modules({RecomputeModule::kCoreAttention})),
      none + test::find_kernel(ks, "flash attention").seconds);
  // The re-run activation is the experts phase's, between the all-to-alls.
  const AnalyticalCostModel act(
      model, test::a100_node(),
      AnalyticalOptions{.recompute = Recompute::kSelective,
                        .recompute_modules = modules({RecomputeModule::kMoeActivation})});
  EXPECT_DOUBLE_EQ(act.moe_phases(0, MicrobatchShape{{4096}}, 1).experts.input_grad_s,
                   plain.moe_phases(0, MicrobatchShape{{4096}}, 1).experts.input_grad_s +
                       test::find_kernel(ks, "experts swiglu").seconds);
}

TEST(RecomputeModules, MlaUpProjRerunsTheTwoUpProjections) {
  const Model model = one_layer(mla_layer());
  const AnalyticalCostModel plain(model, test::a100_node(), AnalyticalOptions{});
  const std::vector<Kernel> ks = plain.kernels(0, MicrobatchShape{{4096}}, 1);
  EXPECT_DOUBLE_EQ(
      input_grad(model, Recompute::kSelective, modules({RecomputeModule::kMlaUpProjection})),
      input_grad(model, Recompute::kSelective, RecomputeModules::none()) +
          test::find_kernel(ks, "q up").seconds + test::find_kernel(ks, "kv up").seconds);
  int rerun = 0;
  for (const Kernel& k : ks)
    rerun += recomputed(k, Recompute::kSelective, modules({RecomputeModule::kMlaUpProjection}));
  EXPECT_EQ(rerun, 2);  // the down projections and the output projection are not its
}

TEST(RecomputeModules, ADenseMlpRerunsWithItsTpCollectivesHiddenAsInTheForward) {
  const Model model = one_layer(test::gpt_layer(4096, 32));
  const MicrobatchShape shape{{4096}};
  const RecomputeModules mlp = modules({RecomputeModule::kMlp});
  for (const bool overlap : {false, true}) {
    const AnalyticalOptions plain{.tp_comm_overlap = overlap};
    AnalyticalOptions rerun = plain;
    rerun.recompute = Recompute::kSelective;
    rerun.recompute_modules = mlp;
    const AnalyticalCostModel base(model, test::a100_node(), plain);
    // The MLP's forward kernels, its fc1/fc2 GEMMs, activation and TP collectives.
    double compute = 0, memory = 0, comm = 0;
    int gemms = 0, collectives = 0;
    for (const Kernel& k : base.kernels(0, shape, 2)) {
      if (!recomputed(k, Recompute::kSelective, mlp)) continue;
      if (k.bound == KernelBound::kCompute) ++gemms, compute += k.seconds;
      if (k.bound == KernelBound::kMemory) memory += k.seconds;
      if (k.bound == KernelBound::kCommunication) ++collectives, comm += k.seconds;
    }
    EXPECT_EQ(gemms, 2);
    EXPECT_GE(collectives, 1);
    const double exposed = overlap ? std::max(0.0, comm - compute) : comm;
    EXPECT_DOUBLE_EQ(
        AnalyticalCostModel(model, test::a100_node(), rerun).layer_cost(0, shape, 2).input_grad_s,
        base.layer_cost(0, shape, 2).input_grad_s + compute + memory + exposed)
        << "tp_comm_overlap " << overlap;
  }
}

TEST(RecomputeModules, TheConfigKeyNamesItsRules) {
  const std::string config =
      test::source_path("validation/megatron-bridge-2511/gpt-oss-120b-b200.toml");
  const Config c = load_config(config, {"cost.recompute=\"selective\"",
                                        "cost.recompute_modules=[\"layernorm\", \"moe_act\"]"});
  EXPECT_EQ(c.cost.recompute_modules,
            modules({RecomputeModule::kLayerNorm, RecomputeModule::kMoeActivation}));
  const auto fails = [&](std::vector<std::string> overrides, const std::string& needle) {
    try {
      load_config(config, overrides);
      ADD_FAILURE() << "accepted: " << overrides.back();
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("cost.recompute_modules"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  fails({"cost.recompute=\"selective\"", "cost.recompute_modules=[\"attn\"]"},
        "unknown module 'attn' (valid: core_attn, layernorm, moe_act, mlp, mla_up_proj)");
  fails({"cost.recompute=\"selective\"", "cost.recompute_modules=[\"moe\"]"}, "not modelled");
  fails({"cost.recompute=\"selective\"", "cost.recompute_modules=[\"mlp\", \"mlp\"]"},
        "listed twice");
}

std::string out_of_memory(const std::string& config, const std::vector<std::string>& overrides) {
  try {
    prepare_study(test::source_path(config), overrides);
  } catch (const InfeasibleError& e) {
    return e.what();
  }
  ADD_FAILURE() << config << " fits";
  return "";
}

TEST(RecomputeModules, OutOfMemoryNamesTheSubmodulesThatSaveMemory) {
  // GPT-OSS on H100 as the table states it (MoE, FlashAttention, MBS 4 at PP 4): the
  // experts' activations and norms.
  const std::string gpt_oss = "validation/megatron-bridge-2511/gpt-oss-120b-h100.toml";
  EXPECT_NE(out_of_memory(gpt_oss, {"cost.recompute=\"none\""})
                .find("try cost.recompute = \"selective\" with cost.recompute_modules = "
                      "[\"layernorm\", \"moe_act\"], cost.recompute = \"full\""),
            std::string::npos);
  // With them on (the file's), selective has nothing more to offer.
  const std::string recipe = out_of_memory(gpt_oss, {});
  EXPECT_EQ(recipe.find("\"selective\""), std::string::npos) << recipe;
  EXPECT_NE(recipe.find("cost.recompute = \"full\""), std::string::npos) << recipe;
  // A dense model under FlashAttention: the MLP (core_attn would save nothing).
  const std::string dense = out_of_memory("validation/megatron-bridge-2511/llama3-8b-b200.toml",
                                          {"schedule.microbatch_size=64"});
  EXPECT_NE(dense.find("cost.recompute = \"selective\" with cost.recompute_modules = [\"mlp\"]"),
            std::string::npos)
      << dense;
  // Selective already on with an empty list: the list is what to change.
  const std::string empty = out_of_memory(
      "validation/megatron-bridge-2511/llama3-8b-b200.toml",
      {"schedule.microbatch_size=64", "cost.recompute=\"selective\"", "cost.recompute_modules=[]"});
  EXPECT_NE(empty.find("try cost.recompute_modules = [\"mlp\"]"), std::string::npos) << empty;
  // Under FP8 fc2 keeps its FP8 copy: moe_act saves nothing, the norms still do.
  const std::string fp8 =
      out_of_memory(gpt_oss, {"cost.recompute=\"none\"", "cost.fp8=\"current\""});
  EXPECT_NE(fp8.find("try cost.recompute = \"selective\" with cost.recompute_modules = "
                     "[\"layernorm\"], cost.recompute = \"full\""),
            std::string::npos)
      << fp8;
}

}  // namespace
}  // namespace loom
