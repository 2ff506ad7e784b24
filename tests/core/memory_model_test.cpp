// The one model-state memory model (core/memory_model.hpp): ZeRO's closed forms by hand
// for a GPT layer, frozen layers and redundant copies holding weights only, and
// parallel.distributed_optimizer sharding exactly the optimizer term of every rank.
#include "core/memory_model.hpp"

#include <gtest/gtest.h>

#include "core/cost_analytical.hpp"
#include "gpt_fixture.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

Model gpt(int layers, int h, bool frozen_first) {
  Model model = test::gpt(layers, h, 16);
  if (!frozen_first) return model;
  std::vector<Module> modules(model.modules().begin(), model.modules().end());
  modules.front().layers.front().frozen = true;
  return Model(modules);
}

TEST(MemoryModel, ZeroStageOneClosedFormsForAGptLayer) {
  // h = 1024 without biases: 12 h^2 parameters per layer (QKV 3h^2, output h^2, MLP 8h^2).
  // bf16 weights (2 B), fp32 gradients (4 B), Adam's fp32 master weights and two moments
  // (12 B): ZeRO's (2 + 2 + 12) Psi, with 4-byte gradients.
  const Model model = gpt(2, 1024, false);
  AnalyticalCostModel cost(model, test::a100_node(), AnalyticalOptions{});
  const double psi = 12.0 * 1024 * 1024;
  ASSERT_DOUBLE_EQ(cost.parameters(1), psi);
  MemoryConstants m;
  StaticMemory one = layer_state_bytes(cost, model, 1, 1, m, 8);
  EXPECT_DOUBLE_EQ(one.parameters, 2 * psi);
  EXPECT_DOUBLE_EQ(one.gradients, 4 * psi);
  EXPECT_DOUBLE_EQ(one.optimizer, 12 * psi);  // no sharding without the key
  // Tensor parallelism divides every term; the distributed optimizer divides only the
  // optimizer term by the data-parallel degree (ZeRO-1: 2 Psi + 4 Psi + 12 Psi / N_d).
  m.distributed_optimizer = true;
  const StaticMemory sharded = layer_state_bytes(cost, model, 1, 2, m, 8);
  EXPECT_DOUBLE_EQ(sharded.parameters, 2 * psi / 2);
  EXPECT_DOUBLE_EQ(sharded.gradients, 4 * psi / 2);
  EXPECT_DOUBLE_EQ(sharded.optimizer, 12 * psi / 2 / 8);
}

TEST(MemoryModel, FrozenLayersAndRedundantCopiesHoldWeightsOnly) {
  const Model model = gpt(2, 512, true);
  AnalyticalCostModel cost(model, test::a100_node(), AnalyticalOptions{});
  const MemoryConstants m;
  const StaticMemory frozen = layer_state_bytes(cost, model, 0, 1, m, 1);
  EXPECT_DOUBLE_EQ(frozen.parameters, 2 * cost.parameters(0));
  EXPECT_DOUBLE_EQ(frozen.gradients + frozen.optimizer, 0);
  const StaticMemory copy = layer_state_bytes(cost, model, 1, 1, m, 1, /*trained=*/false);
  EXPECT_DOUBLE_EQ(copy.total(), 2 * cost.parameters(1));
}

TEST(MemoryModel, DistributedOptimizerShardsEveryRanksOptimizerStateOverDataParallel) {
  for (const char* scheduler : {"1f1b", "interleaved-1f1b", "zb-v", "bamboo"}) {
    const std::vector<std::string> base = {"parallel.dp=4", "parallel.pp=2",
                                           "cost.table.llm.parameters=1e6",
                                           std::string("schedule.name=") + scheduler};
    std::vector<std::string> sharded = base;
    sharded.push_back("parallel.distributed_optimizer=true");
    const auto plain = test::example("uniform-1f1b.toml", base);
    const auto zero1 = test::example("uniform-1f1b.toml", sharded);
    ASSERT_EQ(plain->schedule.static_memory.size(), zero1->schedule.static_memory.size());
    for (const RankId r : plain->schedule.rank_ids()) {
      const StaticMemory& a = plain->schedule.static_memory[r];
      const StaticMemory& b = zero1->schedule.static_memory[r];
      EXPECT_DOUBLE_EQ(b.parameters, a.parameters) << scheduler << " rank " << r;
      EXPECT_DOUBLE_EQ(b.gradients, a.gradients) << scheduler << " rank " << r;
      EXPECT_GT(a.optimizer, 0) << scheduler;
      EXPECT_DOUBLE_EQ(b.optimizer, a.optimizer / 4) << scheduler << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace loom
