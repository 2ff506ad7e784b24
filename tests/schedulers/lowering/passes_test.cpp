// The lowering's passes on hand-written programs (schedulers/lowering/passes.hpp): what
// each pass adds, the send-order rule of point-to-point messages, per-replica orders,
// and the errors a hand-written or imported schedule gets.
#include "schedulers/lowering/passes.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// The textbook model (8 identical layers) on two stages of 4 layers, m = 2.
struct TwoStages {
  explicit TwoStages(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> overrides = {"parallel.pp=2", "schedule.microbatches=2"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    study = test::example("uniform-1f1b.toml", overrides);
    programs.ranks = 2;
    programs.stages = chain_stages(*study->problem.model, {{0, 4}, {4, 8}});
  }
  Schedule lower_with(std::vector<RankOrders> replicas) {
    programs.replicas = std::move(replicas);
    return lower(study->problem, "test", programs);
  }
  std::string text(const Schedule& s, int rank) const {
    std::string out;
    for (const Op& op : s.programs[RankId{rank}])
      out += (out.empty() ? "" : " ") + to_string(op, s);
    return out;
  }
  std::unique_ptr<Study> study;
  PipelinePrograms programs;
};

RankAction act(int stage, Pass pass, int mb) {
  return {.stage = StageId{stage}, .pass = pass, .microbatch = MicrobatchId{mb}};
}

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

TEST(LoweringPasses, AUnitOfActionsReceivesBeforeItAndSendsAfterIt) {
  // RankAction::unit_with_next: both forwards of each stage run as one step (a stage that
  // moves a microbatch's pieces together), so every receive comes first, every send last.
  TwoStages t;
  RankAction f0 = act(0, Pass::kF, 0), g0 = act(1, Pass::kF, 0);
  f0.unit_with_next = g0.unit_with_next = true;
  const Schedule s =
      t.lower_with({{{f0, act(0, Pass::kF, 1), act(0, Pass::kB, 0), act(0, Pass::kB, 1)},
                     {g0, act(1, Pass::kF, 1), act(1, Pass::kB, 0), act(1, Pass::kB, 1)}}});
  EXPECT_EQ(t.text(s, 0).substr(0, 42), "0F0 0F1 0SEND_F0:L4->1 0SEND_F1:L4->1 0REC");
  EXPECT_EQ(t.text(s, 1).substr(0, 38), "1RECV_F0:L4<-0 1RECV_F1:L4<-0 1F0 1F1 ");
  EXPECT_NO_THROW(validate(s, *t.study->problem.model));
  EXPECT_GT(evaluate(s, *t.study->problem.cluster).iteration_time_s(), 0);
}

/// Per-module layouts (hetero-noncolocated's shape) on the textbook model: stage 0 as two
/// data-parallel copies (ranks 0, 1), stage 1 as one TP-2 copy (rank 2) of another module
/// group, m = 2 microbatches of 2 samples, each 2 batch pieces.
struct ModuleCopies : TwoStages {
  explicit ModuleCopies(ModuleId stage1_owner = ModuleId{1})
      : TwoStages({"cost.model=analytical", "schedule.microbatch_size=2"}) {
    const ModuleLayout copies{.tp = 1, .dp = 2, .first_gpu = 0, .gpus = 2, .owner = ModuleId{0}};
    const ModuleLayout llm{.tp = 2, .dp = 1, .first_gpu = 2, .gpus = 2, .owner = stage1_owner};
    programs.stages[StageId{0}].tp = 1;
    programs.stages[StageId{0}].layout = copies;
    programs.stages[StageId{0}].copy_ranks = {PipelineRank{0}, PipelineRank{1}};
    programs.stages[StageId{0}].gpu = {0, 1};
    programs.stages[StageId{1}].tp = 2;
    programs.stages[StageId{1}].layout = llm;
    programs.stages[StageId{1}].copy_ranks = {PipelineRank{2}};
    programs.stages[StageId{1}].gpu = {2};
    programs.ranks = 3;
    programs.pieces = 2;
    // GPipe; microbatch j's piece k is IR microbatch 2j + k, copy c computes piece c.
    programs.replicas = {
        {{act(0, Pass::kF, 0), act(0, Pass::kF, 2), act(0, Pass::kB, 0), act(0, Pass::kB, 2)},
         {act(0, Pass::kF, 1), act(0, Pass::kF, 3), act(0, Pass::kB, 1), act(0, Pass::kB, 3)},
         {}}};
    for (Pass pass : {Pass::kF, Pass::kB}) {
      for (int mb = 0; mb < 4; ++mb)
        programs.replicas[0][PipelineRank{2}].push_back(act(1, pass, mb));
    }
  }
};

TEST(LoweringPasses, ModuleCopiesComputeTheirPiecesAndReduceOverTheCopies) {
  ModuleCopies t;
  const Schedule s = lower(t.study->problem, "test", t.programs);
  ASSERT_EQ(s.num_ranks(), 3);
  EXPECT_EQ(s.num_stages, 2);
  EXPECT_EQ(s.microbatches, 4);
  EXPECT_EQ(s.ranks[1_rank].gpu, 1);
  EXPECT_EQ(s.ranks[2_rank].tp, 2);
  // Stage 1 hears from both copies, each copy from stage 1 about its own pieces only.
  EXPECT_EQ(t.text(s, 2).substr(0, 41), "1RECV_F0:L4<-0 1F0 1RECV_F1:L4<-1 1F1 1RE");
  EXPECT_EQ(t.text(s, 1),
            "0F1 0SEND_F1:L4->2 0F3 0SEND_F3:L4->2 0RECV_B1:L4<-2 0B1 0RECV_B3:L4<-2 0B3 "
            "ALLREDUCE_s0[g0] OPTIMIZER_s0");
  // The microbatch's samples are split between its pieces, each exactly once.
  ASSERT_EQ(s.samples.size(), 1u);
  EXPECT_EQ(s.samples_of(ReplicaId{0}, MicrobatchId{0}), (std::vector<SampleId>{SampleId{0}}));
  EXPECT_EQ(s.samples_of(ReplicaId{0}, MicrobatchId{1}), (std::vector<SampleId>{SampleId{1}}));
  EXPECT_EQ(s.samples_of(ReplicaId{0}, MicrobatchId{3}), (std::vector<SampleId>{SampleId{3}}));
  // A copy computes its piece at the share dp / pieces of its shard: the two-copy stage
  // a whole sample per piece, the one-copy stage half its two-sample shard.
  const auto& f0 = std::get<Compute>(s.programs[0_rank][0]);
  const auto& f1 = std::get<Compute>(s.programs[2_rank][1]);
  EXPECT_GT(f0.seconds, 0);
  EXPECT_GT(f1.seconds, 0);
  // Stage 0's gradients reduce over its two copies; stage 1 has one copy, no reduction.
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[GroupId{0}], (std::vector<RankId>{0_rank, 1_rank}));
  EXPECT_TRUE(
      std::holds_alternative<Collective>(s.programs[0_rank][s.programs[0_rank].size() - 2]));
  // Both copies hold the whole stage; the optimizer state is not sharded by default.
  const auto per_rank = static_memory_per_rank(t.study->problem, t.programs);
  EXPECT_EQ(per_rank[PipelineRank{0}], per_rank[PipelineRank{1}]);
  EXPECT_NO_THROW(validate(s, *t.study->problem.model));
  EXPECT_GT(evaluate(s, *t.study->problem.cluster).iteration_time_s(), 0);
}

TEST(LoweringPasses, ABoundaryFromAnotherModuleGroupIsBroadcastToTheTensorParallelPeers) {
  // Same programs, stage 1 in the same module group as stage 0 or in another one (§3.1:
  // the leader receives, then broadcasts to its TP peer over NVLink).
  ModuleCopies other, same(ModuleId{0});
  const Schedule a = lower(other.study->problem, "test", other.programs);
  const Schedule b = lower(same.study->problem, "test", same.programs);
  const auto& recv = std::get<Recv>(a.programs[2_rank][0]);
  const LinkSpec& nvlink = other.study->problem.cluster->intra_node;
  EXPECT_GT(recv.bytes, 0);
  EXPECT_NEAR(std::get<Compute>(a.programs[2_rank][1]).seconds -
                  std::get<Compute>(b.programs[2_rank][1]).seconds,
              nvlink.latency + recv.bytes / nvlink.bandwidth, 1e-15);
  // Stage 0 (TP 1) receives gradients from the other group and broadcasts nothing.
  auto backward_s = [](const Schedule& s) {
    double total = 0;
    for (const Op& op : s.programs[0_rank]) {
      const auto* c = std::get_if<Compute>(&op);
      if (c && c->pass == Pass::kB) total += c->seconds;
    }
    return total;
  };
  EXPECT_GT(backward_s(a), 0);
  EXPECT_DOUBLE_EQ(backward_s(a), backward_s(b));
}

}  // namespace
}  // namespace loom
