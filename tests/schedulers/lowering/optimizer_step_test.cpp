// Pass 7 of the lowering (add_optimizer_step): each rank's Adam step over the trainable
// parameters it updates, memory-bound at 2 x 12 bytes of fp32 optimizer state + the
// gradient + the weight per parameter, on the Narayanan et al. 39.1B GPT at two replicas.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <variant>

#include "core/errors.hpp"
#include "core/gpu_perf.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::vector<const OptimizerStep*> steps(const Schedule& s, int rank) {
  std::vector<const OptimizerStep*> out;
  for (const Op& op : s.programs[RankId{rank}]) {
    if (const auto* o = std::get_if<OptimizerStep>(&op)) out.push_back(o);
  }
  return out;
}

TEST(OptimizerStep, EveryTrainingRankStepsOnceLastAtMemoryBandwidth) {
  const auto study = test::megatron_gpt();
  const Schedule& s = study->schedule;
  // fp16 weights and gradients (gradient_bytes_per_param = 2), 12 bytes of Adam state.
  constexpr double kBytesPerParameter = 2 * 12 + 2 + 2;
  for (int r = 0; r < s.num_ranks(); ++r) {
    const auto mine = steps(s, r);
    ASSERT_EQ(mine.size(), 1u) << "rank " << r;
    EXPECT_TRUE(std::holds_alternative<OptimizerStep>(s.programs[RankId{r}].back()));
    // It updates the rank's weights: its static parameters at 2 bytes each.
    const double held = s.static_memory[RankId{r}].parameters / 2;
    EXPECT_NEAR(mine[0]->parameters / held, 1.0, 1e-12) << "rank " << r;
    EXPECT_DOUBLE_EQ(mine[0]->seconds,
                     memory_bound_seconds(study->config.cluster.gpu, held * kBytesPerParameter));
  }
  // The first stage (24 layers + the embedding) and the last (24 layers + its copy) alike.
  EXPECT_DOUBLE_EQ(steps(s, 0)[0]->seconds, steps(s, 1)[0]->seconds);
}

TEST(OptimizerStep, TheDistributedOptimizerUpdatesOneShardPerReplica) {
  const auto whole = test::megatron_gpt();
  const auto sharded = test::megatron_gpt({"parallel.distributed_optimizer=true"});
  for (int r = 0; r < whole->schedule.num_ranks(); ++r) {
    EXPECT_DOUBLE_EQ(steps(sharded->schedule, r)[0]->parameters,
                     steps(whole->schedule, r)[0]->parameters / 2);
    EXPECT_LT(steps(sharded->schedule, r)[0]->seconds, steps(whole->schedule, r)[0]->seconds);
  }
}

TEST(OptimizerStep, NoneForAFrozenModelOrUnderTableCosts) {
  const auto frozen = test::megatron_gpt({"model.modules.gpt.frozen=true"});
  for (int r = 0; r < frozen->schedule.num_ranks(); ++r)
    EXPECT_TRUE(steps(frozen->schedule, r).empty()) << r;
  const auto table = test::example("uniform-1f1b.toml");
  for (int r = 0; r < table->schedule.num_ranks(); ++r)
    EXPECT_TRUE(steps(table->schedule, r).empty()) << r;
}

std::string validation_error(const Schedule& s, const Model& model) {
  try {
    validate(s, model);
  } catch (const InfeasibleError& e) {
    return e.what();
  }
  return "";
}

TEST(OptimizerStep, ValidationRejectsAStepTooEarlyTwiceOrMissing) {
  const auto study = test::megatron_gpt({"parallel.dp=1", "cluster.nodes=2"});
  const Model& model = study->config.model;
  ASSERT_NO_THROW(validate(study->schedule, model));
  auto rank0 = [](Schedule& s) -> std::vector<Op>& { return s.programs[0_rank]; };

  Schedule early = study->schedule;
  std::rotate(rank0(early).begin(), rank0(early).end() - 1, rank0(early).end());
  EXPECT_NE(validation_error(early, model).find("optimizer step before the last computation"),
            std::string::npos);

  Schedule twice = study->schedule;
  rank0(twice).push_back(rank0(twice).back());
  EXPECT_NE(validation_error(twice, model).find("steps its optimizer 2 times"), std::string::npos);

  Schedule missing = study->schedule;
  rank0(missing).pop_back();
  EXPECT_NE(validation_error(missing, model).find("never steps its optimizer"), std::string::npos);
}

}  // namespace
}  // namespace loom
