// Each lowering feature (schedulers/lowering/features.hpp) on a hand-written program, with
// no scheduler: what it adds to the IR, the memory it costs, and that features compose.
#include "schedulers/lowering/features.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "schedulers/lowering/two_stages.hpp"

namespace loom {
namespace {

using test::act;
using test::TwoStages;

RankAction joined(RankAction a, Join join) {
  a.with_next = join;
  return a;
}

/// Index of the first op of `program` the predicate holds for (size() when none).
template <class Pred>
size_t find_op(const std::vector<Op>& program, Pred pred) {
  return static_cast<size_t>(std::find_if(program.begin(), program.end(), pred) - program.begin());
}
bool is_compute(const Op& op, Pass pass, int mb) {
  const auto* c = std::get_if<Compute>(&op);
  return c && c->pass == pass && c->microbatch == MicrobatchId{mb} && !c->redundant;
}

/// `count` Computes flagged overlapped in the whole schedule, which validates and runs.
void expect_overlapped_computes_and_runs(const TwoStages& t, const Schedule& s, int count) {
  int flagged = 0;
  for (const std::vector<Op>& program : s.programs) {
    for (const Op& op : program) {
      const auto* c = std::get_if<Compute>(&op);
      flagged += c && c->overlapped;
    }
  }
  EXPECT_EQ(flagged, count);
  EXPECT_NO_THROW(validate(s, *t.study->problem.model));
  EXPECT_GT(evaluate(s, *t.study->problem.cluster).iteration_time_s(), 0);
}

// --- Join::kOverlap ------------------------------------------------------------------

/// 1F1B on two stages, m = 2, with rank 0's steady state as one overlapped pair (F1;B0).
std::vector<RankOrders> overlapped_1f1b() {
  return {{{act(0, Pass::kF, 0), joined(act(0, Pass::kF, 1), Join::kOverlap), act(0, Pass::kB, 0),
            act(0, Pass::kB, 1)},
           {act(1, Pass::kF, 0), act(1, Pass::kB, 0), act(1, Pass::kF, 1), act(1, Pass::kB, 1)}}};
}

TEST(LoweringFeatures, AnOverlappedPairReceivesBeforeItsForwardAndSendsAfterItsBackward) {
  TwoStages t;
  const Schedule s = t.lower_with(overlapped_1f1b());
  const std::vector<Op>& r0 = s.programs[0_rank];
  const size_t f1 = find_op(r0, [](const Op& op) { return is_compute(op, Pass::kF, 1); });
  ASSERT_LT(f1 + 1, r0.size());
  // The two halves are adjacent computes, both flagged, F first.
  const auto& f = std::get<Compute>(r0[f1]);
  const auto* b = std::get_if<Compute>(&r0[f1 + 1]);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(f.overlapped && b->overlapped);
  EXPECT_EQ(b->pass, Pass::kB);
  EXPECT_EQ(b->microbatch, MicrobatchId{0});
  // B0's gradient arrives before the pair; F1's output leaves after it.
  EXPECT_TRUE(std::holds_alternative<Recv>(r0[f1 - 1]));
  EXPECT_EQ(std::get<Recv>(r0[f1 - 1]).tag.pass, Pass::kB);
  ASSERT_LT(f1 + 2, r0.size());
  EXPECT_EQ(std::get<Send>(r0[f1 + 2]).tag.microbatch, MicrobatchId{1});
  // Nothing else is overlapped, and the schedule runs.
  expect_overlapped_computes_and_runs(t, s, 2);
}

TEST(LoweringFeatures, AnOverlapJoinsAForwardToABackwardOfAnotherMicrobatchOnly) {
  auto rejects = [](std::vector<RankOrders> orders) {
    TwoStages t;
    try {
      t.lower_with(std::move(orders));
    } catch (const InputError& e) {
      return std::string(e.what()).find("an overlapped action") != std::string::npos;
    }
    return false;
  };
  std::vector<RankOrders> orders = overlapped_1f1b();
  EXPECT_FALSE(rejects(orders));
  // A B that opens the pair.
  orders[0][PipelineRank{0}][1].with_next = Join::kNone;
  orders[0][PipelineRank{0}][2].with_next = Join::kOverlap;
  EXPECT_TRUE(rejects(orders));
  // An F followed by an F.
  orders = overlapped_1f1b();
  orders[0][PipelineRank{0}][0].with_next = Join::kOverlap;
  orders[0][PipelineRank{0}][1].with_next = Join::kNone;
  EXPECT_TRUE(rejects(orders));
  // An F followed by the B of its own microbatch.
  orders = {{{joined(act(0, Pass::kF, 0), Join::kOverlap), act(0, Pass::kB, 0), act(0, Pass::kF, 1),
              act(0, Pass::kB, 1)},
             overlapped_1f1b()[0][PipelineRank{1}]}};
  EXPECT_TRUE(rejects(orders));
}

// --- Join::kUnit ---------------------------------------------------------------------

TEST(LoweringFeatures, AUnitReceivesBeforeItAndSendsAfterIt) {
  // Join::kUnit: both forwards of each stage run as one step (a stage that moves a
  // microbatch's pieces together), so every receive comes first, every send last.
  TwoStages t;
  RankAction f0 = act(0, Pass::kF, 0), g0 = act(1, Pass::kF, 0);
  f0.with_next = g0.with_next = Join::kUnit;
  const Schedule s =
      t.lower_with({{{f0, act(0, Pass::kF, 1), act(0, Pass::kB, 0), act(0, Pass::kB, 1)},
                     {g0, act(1, Pass::kF, 1), act(1, Pass::kB, 0), act(1, Pass::kB, 1)}}});
  EXPECT_EQ(t.text(s, 0).substr(0, 42), "0F0 0F1 0SEND_F0:L4->1 0SEND_F1:L4->1 0REC");
  EXPECT_EQ(t.text(s, 1).substr(0, 38), "1RECV_F0:L4<-0 1RECV_F1:L4<-0 1F0 1F1 ");
  EXPECT_NO_THROW(validate(s, *t.study->problem.model));
  EXPECT_GT(evaluate(s, *t.study->problem.cluster).iteration_time_s(), 0);
}

// --- SecondPipeline -------------------------------------------------------------------

/// Chimera's shape on two ranks: microbatch 0 down (stage s on rank s), microbatch 1 up
/// (stage s on rank 1 - s).
void second_pipeline(TwoStages& t, int first_up) {
  t.programs.up = SecondPipeline{.stage_rank = {PipelineRank{1}, PipelineRank{0}},
                                 .first_microbatch = MicrobatchId{first_up}};
}

TEST(LoweringFeatures, ASecondPipelineRunsLaterMicrobatchesOnTheOtherRanks) {
  TwoStages one({"cost.model=analytical"}), two({"cost.model=analytical"});
  const PerPipelineRank<StaticMemory> single =
      static_memory_per_rank(one.study->problem, one.programs);
  second_pipeline(two, 1);
  const Schedule s = two.lower_with(
      {{{act(0, Pass::kF, 0), act(1, Pass::kF, 1), act(1, Pass::kB, 1), act(0, Pass::kB, 0)},
        {act(0, Pass::kF, 1), act(1, Pass::kF, 0), act(1, Pass::kB, 0), act(0, Pass::kB, 1)}}});
  // Rank 0 computes stage 0 of microbatch 0 and stage 1 of microbatch 1.
  EXPECT_EQ(two.text(s, 0).substr(0, 37), "0F0 0SEND_F0:L4->1 1RECV_F1:L4<-1 1F1");
  // Every rank holds both stages, and each stage's gradients sum over its two copies.
  ASSERT_GT(single[PipelineRank{0}].total(), 0);
  const PerPipelineRank<StaticMemory> both =
      static_memory_per_rank(two.study->problem, two.programs);
  for (const PipelineRank r : two.programs.rank_ids()) {
    EXPECT_DOUBLE_EQ(both[r].total(),
                     single[PipelineRank{0}].total() + single[PipelineRank{1}].total());
  }
  ASSERT_FALSE(s.groups.empty());
  EXPECT_EQ(s.groups[GroupId{0}], (std::vector<RankId>{0_rank, 1_rank}));
  EXPECT_NO_THROW(validate(s, *two.study->problem.model));
  EXPECT_GT(evaluate(s, *two.study->problem.cluster).iteration_time_s(), 0);
}

TEST(LoweringFeatures, AnOverlapAndASecondPipelineCompose) {
  // DualPipe's shape (DeepSeek-V3 §3.2.1) in miniature: two pipelines of two stages,
  // microbatches 0, 1 down and 2, 3 up, each rank's steady state one overlapped pair.
  TwoStages t({"schedule.microbatches=4"});
  second_pipeline(t, 2);
  const Schedule s =
      t.lower_with({{{act(0, Pass::kF, 0), act(0, Pass::kF, 1), act(1, Pass::kF, 2),
                      joined(act(1, Pass::kF, 3), Join::kOverlap), act(1, Pass::kB, 2),
                      act(1, Pass::kB, 3), act(0, Pass::kB, 0), act(0, Pass::kB, 1)},
                     {act(0, Pass::kF, 2), act(0, Pass::kF, 3), act(1, Pass::kF, 0),
                      joined(act(1, Pass::kF, 1), Join::kOverlap), act(1, Pass::kB, 0),
                      act(1, Pass::kB, 1), act(0, Pass::kB, 2), act(0, Pass::kB, 3)}}});
  expect_overlapped_computes_and_runs(t, s, 4);
}

// --- RedundantForwards -------------------------------------------------------------------

std::vector<RankOrders> one_f_one_b() {
  return {{{act(0, Pass::kF, 0), act(0, Pass::kF, 1), act(0, Pass::kB, 0), act(0, Pass::kB, 1)},
           {act(1, Pass::kF, 0), act(1, Pass::kB, 0), act(1, Pass::kF, 1), act(1, Pass::kB, 1)}}};
}

TEST(LoweringFeatures, ARedundantCopyRunsForwardOnlyBeforeTheStageAndHoldsWeightsOnly) {
  // Stage 1 also runs stage 0's layers, forward only (encoders-replicated's copies).
  TwoStages plain({"cost.model=analytical"}), copy({"cost.model=analytical"});
  const Schedule base = plain.lower_with(one_f_one_b());
  copy.programs.stages[StageId{1}].forward_copies.before = {{ModuleId{0}, 0, 4}};
  const Schedule s = copy.lower_with(one_f_one_b());
  // Rank 1: the copy's forward first (it needs no input), then the stage's own.
  const std::vector<Op>& r1 = s.programs[1_rank];
  const auto& redundant = std::get<Compute>(r1[0]);
  EXPECT_TRUE(redundant.redundant);
  EXPECT_EQ(redundant.pass, Pass::kF);
  EXPECT_EQ(redundant.first_layer, 0);
  EXPECT_EQ(redundant.end_layer, 4);
  EXPECT_TRUE(std::holds_alternative<Recv>(r1[1]));
  EXPECT_TRUE(is_compute(r1[2], Pass::kF, 0));
  // It costs its forward's time, feeds nothing and has no backward: the messages match.
  int redundant_ops = 0;
  for (const Op& op : r1) {
    const auto* c = std::get_if<Compute>(&op);
    redundant_ops += c && c->redundant;
    EXPECT_FALSE(c && c->redundant && c->pass != Pass::kF);
  }
  EXPECT_EQ(redundant_ops, 2);  // one per microbatch
  EXPECT_EQ(s.programs[0_rank], base.programs[0_rank]);
  EXPECT_DOUBLE_EQ(redundant.seconds, std::get<Compute>(base.programs[0_rank][0]).seconds);
  // The copy holds stage 0's weights, none of its gradients or optimizer state.
  const auto plain_memory = static_memory_per_rank(plain.study->problem, plain.programs);
  const auto memory = static_memory_per_rank(copy.study->problem, copy.programs);
  ASSERT_GT(plain_memory[PipelineRank{0}].gradients, 0);
  EXPECT_DOUBLE_EQ(
      memory[PipelineRank{1}].parameters,
      plain_memory[PipelineRank{1}].parameters + plain_memory[PipelineRank{0}].parameters);
  EXPECT_DOUBLE_EQ(memory[PipelineRank{1}].gradients, plain_memory[PipelineRank{1}].gradients);
  EXPECT_DOUBLE_EQ(memory[PipelineRank{1}].optimizer, plain_memory[PipelineRank{1}].optimizer);
  EXPECT_NO_THROW(validate(s, *copy.study->problem.model));
  EXPECT_GT(evaluate(s, *copy.study->problem.cluster).iteration_time_s(),
            evaluate(base, *plain.study->problem.cluster).iteration_time_s());
}

TEST(LoweringFeatures, ASuccessorCopyRunsAfterTheStageOnItsOutputAndHoldsTheWholeState) {
  // Stage 0 also runs stage 1's layers on its own output (Bamboo's FRC).
  TwoStages plain({"cost.model=analytical"}), copy({"cost.model=analytical"});
  copy.programs.stages[StageId{0}].forward_copies.successor = {{ModuleId{0}, 4, 8}};
  const Schedule s = copy.lower_with(one_f_one_b());
  // Rank 0: its forward, the real output's send, then the copy.
  EXPECT_EQ(copy.text(s, 0).substr(0, 22), "0F0 0SEND_F0:L4->1 0F0");
  const auto& successor = std::get<Compute>(s.programs[0_rank][2]);
  EXPECT_TRUE(successor.redundant);
  EXPECT_EQ(successor.first_layer, 4);
  EXPECT_EQ(successor.end_layer, 8);
  // The copy's activations stay with the stage's own until its backward.
  EXPECT_DOUBLE_EQ(std::get<Compute>(s.programs[0_rank][0]).activation_bytes,
                   2 * std::get<Compute>(s.programs[1_rank][1]).activation_bytes);
  // Rank 0 holds both stages' whole state, ready to take over stage 1's training.
  const auto plain_memory = static_memory_per_rank(plain.study->problem, plain.programs);
  const auto memory = static_memory_per_rank(copy.study->problem, copy.programs);
  ASSERT_GT(plain_memory[PipelineRank{0}].gradients, 0);
  EXPECT_DOUBLE_EQ(memory[PipelineRank{0}].total(),
                   plain_memory[PipelineRank{0}].total() + plain_memory[PipelineRank{1}].total());
  EXPECT_EQ(memory[PipelineRank{1}], plain_memory[PipelineRank{1}]);
  EXPECT_NO_THROW(validate(s, *copy.study->problem.model));
}

// --- BatchPieces ---------------------------------------------------------------------

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
    programs.batch.pieces = 2;
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

TEST(LoweringFeatures, BatchPiecesSplitEachMicrobatchOverTheModuleCopies) {
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

TEST(LoweringFeatures, ABoundaryFromAnotherModuleGroupIsBroadcastToTheTensorParallelPeers) {
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

// --- ActionKind::kBoundary -----------------------------------------------------------------

TEST(LoweringFeatures, ABoundaryActionAllGathersIntoAColocatedConsumerAndComputesNothing) {
  // hetero-colocated's shape on two GPUs: stage 0 as two data-parallel copies (one per
  // GPU), stage 1 as one TP-2 grid on the same GPUs; a rank is a GPU, each computing its
  // batch piece, and a boundary action gathers stage 0's slices into each TP shard.
  TwoStages t({"cost.model=analytical", "schedule.microbatches=1", "schedule.microbatch_size=2"});
  const ModuleLayout dp{.tp = 1, .dp = 2, .first_gpu = 0, .gpus = 2, .owner = ModuleId{0}};
  const ModuleLayout tp{.tp = 2, .dp = 1, .first_gpu = 0, .gpus = 2, .owner = ModuleId{1}};
  for (const auto& [stage, layout] : {std::pair{0, dp}, std::pair{1, tp}}) {
    StageSpec& spec = t.programs.stages[StageId{stage}];
    spec.tp = 1;
    spec.layout = layout;
    spec.copy_ranks = {PipelineRank{0}, PipelineRank{1}};
    spec.gpu = {0, 1};
  }
  t.programs.batch.pieces = 2;
  auto boundary = [](Pass pass, int piece) {
    RankAction a = act(0, pass, piece);
    a.kind = ActionKind::kBoundary;
    return a;
  };
  auto gpu = [&](int piece) {
    return std::vector<RankAction>{act(0, Pass::kF, piece),   boundary(Pass::kF, piece),
                                   act(1, Pass::kF, piece),   act(1, Pass::kB, piece),
                                   boundary(Pass::kB, piece), act(0, Pass::kB, piece)};
  };
  const Schedule s = t.lower_with({{gpu(0), gpu(1)}});
  for (const RankId r : {0_rank, 1_rank}) {
    const std::vector<Op>& program = s.programs[r];
    // The forward leg: one all-gather over both GPUs, right after stage 0's forward.
    const auto* gather = std::get_if<Collective>(&program[1]);
    ASSERT_NE(gather, nullptr) << t.text(s, r.value());
    EXPECT_EQ(gather->kind, CollectiveKind::kAllGather);
    EXPECT_EQ(s.groups[gather->group], (std::vector<RankId>{0_rank, 1_rank}));
    EXPECT_EQ(gather->stage, StageId{1});
    EXPECT_GT(gather->bytes, 0);
    // No message crosses the colocated boundary, and no compute comes of the action.
    int computes = 0;
    for (const Op& op : program) {
      EXPECT_FALSE(std::holds_alternative<Send>(op) || std::holds_alternative<Recv>(op));
      computes += std::holds_alternative<Compute>(op);
    }
    EXPECT_EQ(computes, 4);
  }
  EXPECT_NO_THROW(validate(s, *t.study->problem.model));
  EXPECT_GT(evaluate(s, *t.study->problem.cluster).iteration_time_s(), 0);
}

// --- Composition ---------------------------------------------------------------------------

TEST(LoweringFeatures, FeaturesThatCannotGoTogetherAreASchedulersBug) {
  // Batch pieces and boundary actions need per-module layouts, an overlapped pair and a
  // second pipeline the single layout: a scheduler's bug (logic_error), not bad input.
  auto lowers = [](const std::function<void(TwoStages&)>& request) {
    TwoStages t;
    t.programs.replicas = one_f_one_b();
    request(t);
    lower(t.study->problem, "test", t.programs);
  };
  EXPECT_NO_THROW(lowers([](TwoStages&) {}));
  EXPECT_THROW(lowers([](TwoStages& t) { t.programs.batch.pieces = 2; }), std::logic_error);
  EXPECT_THROW(lowers([](TwoStages& t) {
                 t.programs.replicas[0][PipelineRank{0}][0].kind = ActionKind::kBoundary;
               }),
               std::logic_error);
  ModuleCopies sharded;
  sharded.programs.replicas[0][PipelineRank{0}][0].with_next = Join::kOverlap;
  EXPECT_THROW(lower(sharded.study->problem, "test", sharded.programs), std::logic_error);
  ModuleCopies two_ways;
  two_ways.programs.up = SecondPipeline{.stage_rank = {PipelineRank{2}, PipelineRank{0}}};
  EXPECT_THROW(lower(two_ways.study->problem, "test", two_ways.programs), std::logic_error);
}

}  // namespace
}  // namespace loom
