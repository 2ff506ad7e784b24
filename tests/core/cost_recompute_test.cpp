// Activation checkpointing (core/cost_recompute.hpp): the backward re-runs the forward,
// a layer keeps only its input, and Eq 3.2 still removes all of it where p(L) is false.
#include "core/cost_recompute.hpp"

#include <gtest/gtest.h>

#include "core/cost_table.hpp"
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
      m, std::make_unique<TableCostModel>(
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

}  // namespace loom
