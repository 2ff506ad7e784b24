// Activation checkpointing (core/cost_recompute.hpp): the backward re-runs the forward,
// a layer keeps only its input, and Eq 3.2 still removes all of it where p(L) is false.
#include "core/cost_recompute.hpp"

#include <gtest/gtest.h>

#include "core/cost_table.hpp"
#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

Module module(const std::string& name, ModuleKind kind, bool frozen,
              std::vector<std::string> inputs = {}) {
  return test::tiny_module(name, kind, 1, frozen, std::move(inputs));
}

}  // namespace

TEST(Recompute, BackwardRerunsTheForwardOnlyWhereThereIsABackward) {
  const Model m({module("vit", ModuleKind::kEncoder, true),
                 module("proj", ModuleKind::kProjector, false, {"vit"}),
                 module("llm", ModuleKind::kLlm, true, {"proj"})});
  const TableEntry e{1.0, 2.0, 3.0, 1e9, 0, 0};  // F, Bd, Bw, activation bytes
  RecomputeCostModel cost(
      m, Recompute::kFull,
      std::make_unique<TableCostModel>(
          m, std::map<std::string, TableEntry>{{"vit", e}, {"proj", e}, {"llm", e}}));
  const MicrobatchShape shape{{100, 50}};
  // Frozen encoder, nothing trainable upstream: no backward, so nothing to recompute.
  const PassCost vit = effective_cost(cost, m, 0, shape, 1);
  EXPECT_EQ(vit.forward_s, 1.0);
  EXPECT_EQ(vit.backward_s(), 0.0);
  // Trainable projector: Bd + F (recompute) and Bw.
  const PassCost proj = effective_cost(cost, m, 1, shape, 1);
  EXPECT_EQ(proj.input_grad_s, 3.0);
  EXPECT_EQ(proj.weight_grad_s, 3.0);
  // Frozen LLM after it: Bd + F, no Bw.
  const PassCost llm = effective_cost(cost, m, 2, shape, 1);
  EXPECT_EQ(llm.input_grad_s, 3.0);
  EXPECT_EQ(llm.weight_grad_s, 0.0);
  // Only the layer input is kept: tokens x hidden x dtype bytes (150 x 64 x 2).
  EXPECT_EQ(cost.activation_bytes(2, shape, 1), 150.0 * 64 * 2);
  EXPECT_EQ(cost.name(), "table+recompute");
}

TEST(Recompute, AModulesOwnSettingOverridesTheGlobalOne) {
  // heterogeneous-parallelism-megatron Table A4: "LLM recompute off; encoder full
  // recompute is enabled". The encoder below is trainable (so it has a backward).
  Module vit = module("vit", ModuleKind::kEncoder, false);
  for (LayerSpec& l : vit.layers) l.recompute = Recompute::kFull;
  Module llm = module("llm", ModuleKind::kLlm, false, {"vit"});
  const Model m({vit, llm});
  const TableEntry e{1.0, 2.0, 3.0, 1e9, 0, 0};
  const RecomputeCostModel cost(m, Recompute::kNone,
                                std::make_unique<TableCostModel>(
                                    m, std::map<std::string, TableEntry>{{"vit", e}, {"llm", e}}));
  const MicrobatchShape shape{{100}};
  EXPECT_EQ(cost.layer_cost(0, shape, 1).input_grad_s, 3.0);  // Bd + F
  EXPECT_EQ(cost.activation_bytes(0, shape, 1), 100.0 * 64 * 2);
  EXPECT_EQ(cost.layer_cost(1, shape, 1).input_grad_s, 2.0);  // the global "none"
  EXPECT_EQ(cost.activation_bytes(1, shape, 1), 1e9);
}

TEST(Recompute, AModulesKeyIsReadAndCheckedByTheConfig) {
  const auto study = test::example("vlm-frozen.toml", {"model.modules.vision.recompute=\"full\""});
  const Config& c = study->config;
  const Module& vision = c.model.module(*c.model.module_index("vision"));
  EXPECT_EQ(vision.layers.front().recompute, Recompute::kFull);
  EXPECT_FALSE(c.model.module(*c.model.module_index("llm")).layers.front().recompute);
  EXPECT_THROW(test::example("vlm-frozen.toml", {"model.modules.vision.recompute=\"most\""}),
               InputError);
  try {  // the fixed-fraction model cannot tell the attention core's share
    test::example("vlm-frozen.toml", {"model.modules.vision.recompute=\"selective\""});
    ADD_FAILURE() << "selective recompute under cost.efficiency was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.modules.vision.recompute"), std::string::npos)
        << e.what();
  }
}

}  // namespace loom

namespace loom {

TEST(MeasuredBackward, ScalesWhateverBackwardTheFrozenStatusLeaves) {
  // Dissertation Table 3.2 measured a frozen LLM's backward at 3.5-10x its forward; a
  // module's backward_over_forward carries such a measurement into the cost model.
  Module llm = module("llm", ModuleKind::kLlm, true, {"proj"});
  llm.backward_over_forward = 3.5;
  Module proj = module("proj", ModuleKind::kProjector, false, {"vit"});
  proj.backward_over_forward = 4.0;
  Module vit = module("vit", ModuleKind::kEncoder, true);
  vit.backward_over_forward = 9.0;
  const Model m({vit, proj, llm});
  const TableEntry e{1.0, 2.0, 3.0, 1e9, 0, 0};  // F, Bd, Bw
  const TableCostModel cost(m, {{"vit", e}, {"proj", e}, {"llm", e}});
  const MicrobatchShape shape{{100}};
  // Frozen LLM: only the input gradient is left, and it becomes 3.5 x F.
  const PassCost l = effective_cost(cost, m, 2, shape, 1);
  EXPECT_DOUBLE_EQ(l.input_grad_s, 3.5);
  EXPECT_EQ(l.weight_grad_s, 0.0);
  // Trainable projector: Bd + Bw = 4 x F, in the model's 2 : 3 split.
  const PassCost p = effective_cost(cost, m, 1, shape, 1);
  EXPECT_DOUBLE_EQ(p.input_grad_s, 1.6);
  EXPECT_DOUBLE_EQ(p.weight_grad_s, 2.4);
  // A frozen encoder with nothing trainable upstream still has no backward at all.
  EXPECT_EQ(effective_cost(cost, m, 0, shape, 1).backward_s(), 0.0);
  EXPECT_EQ(effective_cost(cost, m, 0, shape, 1).forward_s, 1.0);
}

TEST(MeasuredBackward, TheConfigKeyMustBePositive) {
  EXPECT_NO_THROW(
      test::example("vlm-frozen.toml", {"model.modules.llm.backward_over_forward=3.45"}));
  for (const std::string bad : {"0", "-2", "\"fast\""}) {
    try {
      test::example("vlm-frozen.toml", {"model.modules.llm.backward_over_forward=" + bad});
      FAIL() << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("model.modules.llm.backward_over_forward"),
                std::string::npos)
          << e.what();
    }
  }
  const auto st =
      test::example("vlm-frozen.toml", {"model.modules.llm.backward_over_forward=3.45"});
  EXPECT_DOUBLE_EQ(
      st->config.model.module(st->config.model.module_index("llm").value()).backward_over_forward,
      3.45);
}

}  // namespace loom
