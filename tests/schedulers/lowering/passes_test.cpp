// The lowering's passes on hand-written programs (schedulers/lowering/passes.hpp): what
// each pass adds, the send-order rule of point-to-point messages, per-replica orders,
// and the errors a hand-written or imported schedule gets.
#include "schedulers/lowering/passes.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "schedulers/lowering/two_stages.hpp"

namespace loom {
namespace {

using test::act;
using test::TwoStages;

TEST(LoweringPasses, ExpandActionsEmitsOnlyComputesOnePerSegment) {
  TwoStages t;
  t.programs.replicas = {
      {{act(0, Pass::kF, 0), act(0, Pass::kB, 0)}, {act(1, Pass::kF, 0), act(1, Pass::kB, 0)}}};
  lowering::Context ctx(t.study->problem, t.programs, LoweringCosts::kTrue);
  Schedule s;
  lowering::place_ranks(ctx, s);
  lowering::assign_samples(ctx, s);
  lowering::cost_microbatches(ctx, s);
  lowering::expand_actions(ctx, s);
  EXPECT_EQ(t.text(s, 0), "0F0 0B0");
  EXPECT_EQ(t.text(s, 1), "1F0 1B0");
  const auto& f = std::get<Compute>(s.programs[0_rank][0]);
  EXPECT_EQ(f.first_layer, 0);
  EXPECT_EQ(f.end_layer, 4);
  EXPECT_NEAR(f.seconds, 4 * 0.5e-3, 1e-12);  // 4 layers of F = 0.5 ms
  EXPECT_NEAR(std::get<Compute>(s.programs[0_rank][1]).seconds, 4 * 1.0e-3, 1e-12);
}

TEST(LoweringPasses, AReceiverTakesAChannelInTheSendersOrder) {
  // Stage 1 runs microbatch 1 before 0; stage 0 sends 0 then 1. Messages match in send
  // order per channel, so stage 1 receives both before its first forward, and stage 0
  // receives the gradients of 1 then 0 before its first backward.
  TwoStages t;
  const Schedule s = t.lower_with(
      {{{act(0, Pass::kF, 0), act(0, Pass::kF, 1), act(0, Pass::kB, 0), act(0, Pass::kB, 1)},
        {act(1, Pass::kF, 1), act(1, Pass::kB, 1), act(1, Pass::kF, 0), act(1, Pass::kB, 0)}}});
  const std::string r1 = t.text(s, 1);
  EXPECT_LT(r1.find("RECV_F0"), r1.find("RECV_F1"));
  EXPECT_LT(r1.find("RECV_F1"), r1.find("1F1"));
  const std::string r0 = t.text(s, 0);
  EXPECT_LT(r0.find("RECV_B1"), r0.find("RECV_B0"));
  EXPECT_LT(r0.find("RECV_B0"), r0.find("0B0"));
  EXPECT_NO_THROW(validate(s, *t.study->problem.model));
  EXPECT_GT(evaluate(s, *t.study->problem.cluster).iteration_time_s(), 0);
}

TEST(LoweringPasses, EachReplicaMayRunItsOwnOrder) {
  TwoStages t({"parallel.dp=2"});
  const RankOrders forward_first = {
      {act(0, Pass::kF, 0), act(0, Pass::kF, 1), act(0, Pass::kB, 0), act(0, Pass::kB, 1)},
      {act(1, Pass::kF, 0), act(1, Pass::kB, 0), act(1, Pass::kF, 1), act(1, Pass::kB, 1)}};
  RankOrders swapped = forward_first;
  std::swap(swapped[PipelineRank{1}][0], swapped[PipelineRank{1}][2]);
  std::swap(swapped[PipelineRank{1}][1], swapped[PipelineRank{1}][3]);
  const Schedule s = t.lower_with({forward_first, swapped});
  ASSERT_EQ(s.num_ranks(), 4);
  const std::string replica0 = t.text(s, 1), replica1 = t.text(s, 3);
  EXPECT_LT(replica0.find("1F0"), replica0.find("1F1"));
  EXPECT_LT(replica1.find("1F1"), replica1.find("1F0"));
  EXPECT_NO_THROW(validate(s, *t.study->problem.model));
}

TEST(LoweringPasses, AMissingProducerNamesRankStepAndLayer) {
  TwoStages t;
  try {
    t.lower_with(
        {{{act(0, Pass::kF, 0), act(0, Pass::kB, 0)},
          {act(1, Pass::kF, 0), act(1, Pass::kB, 0), act(1, Pass::kF, 1), act(1, Pass::kB, 1)}}});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1 step 2 (1F1)"), std::string::npos) << what;
    EXPECT_NE(what.find("output of layer 3 for microbatch 1 from rank 0"), std::string::npos)
        << what;
  }
}

TEST(LoweringPasses, AStageOnAnotherRankIsRejected) {
  TwoStages t;
  try {
    t.lower_with({{{act(1, Pass::kF, 0)}, {}}});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 step 0 (1F0): stage 1 is not on this rank"),
              std::string::npos)
        << e.what();
  }
}

TEST(LoweringPasses, ChunksOnOneRankShareOneAllReduceAndTheirMemory) {
  // Four virtual stages on two ranks (Megatron's placement: stage s on rank s mod 2).
  TwoStages t({"parallel.dp=2", "cost.model=analytical"});  // layers with parameters
  t.programs.stages = chain_stages(*t.study->problem.model, {{0, 2}, {2, 4}, {4, 6}, {6, 8}});
  const auto per_rank = static_memory_per_rank(t.study->problem, t.programs);
  ASSERT_EQ(per_rank.size(), 2u);
  EXPECT_DOUBLE_EQ(per_rank[PipelineRank{0}].parameters,
                   per_rank[PipelineRank{1}].parameters);  // 4 layers each
  RankOrders orders(2);
  for (int r = 0; r < 2; ++r) {
    for (int mb = 0; mb < 2; ++mb) {
      for (int s : {r, r + 2}) orders[PipelineRank{r}].push_back(act(s, Pass::kF, mb));
    }
    for (int mb = 0; mb < 2; ++mb) {
      for (int s : {r + 2, r}) orders[PipelineRank{r}].push_back(act(s, Pass::kB, mb));
    }
  }
  const Schedule s = t.lower_with({orders});
  int allreduces = 0;
  for (const Op& op : s.programs[0_rank]) allreduces += std::holds_alternative<Collective>(op);
  EXPECT_EQ(allreduces, 1);
  EXPECT_NO_THROW(validate(s, *t.study->problem.model));
}

}  // namespace
}  // namespace loom
