// Boundary communicators (heterogeneous-parallelism-megatron §3.1-3.2, Figs 2-3, App. A.4):
// routes and volumes on hand-computed cases.
#include "schedulers/lowering/boundary.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"

namespace loom {
namespace {

ModuleLayout grid(int tp, int cp, int pp, int dp, int first) {
  ModuleLayout l;
  l.tp = tp;
  l.cp = cp;
  l.pp = pp;
  l.dp = dp;
  l.first_gpu = first;
  l.gpus = l.size();
  return l;
}

constexpr double kUnit = 1000;  // bytes per sample

TEST(HeteroBoundary, ShardOverlapsFollowTheBatchIntervals) {
  // Fan-in DP 4 -> 2 on a batch of 8: source shards of 2 samples, pairs (0,1) -> 0, (2,3) -> 1.
  const auto in = shard_overlaps(4, 2, 8);
  ASSERT_EQ(in.size(), 4u);
  const int expected_dst[] = {0, 0, 1, 1};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(in[static_cast<size_t>(k)].src_replica, k);
    EXPECT_EQ(in[static_cast<size_t>(k)].dst_replica, expected_dst[k]);
    EXPECT_DOUBLE_EQ(in[static_cast<size_t>(k)].units, 2);
  }
  const auto out = shard_overlaps(1, 4, 8);  // fan-out: one shard splits four ways
  ASSERT_EQ(out.size(), 4u);
  for (const ShardOverlap& o : out) EXPECT_EQ(o.src_replica, 0);
  EXPECT_EQ(boundary_kind(4, 2, "x"), BoundaryKind::kFanIn);
  EXPECT_EQ(boundary_kind(1, 4, "x"), BoundaryKind::kFanOut);
  EXPECT_EQ(boundary_kind(2, 2, "x"), BoundaryKind::kEqual);
  EXPECT_THROW(boundary_kind(3, 2, "parallel.modules.vision"), InputError);
}

TEST(HeteroBoundary, NonColocatedFanInSendsOneMessagePerSourceLeaderAndBroadcastsOnce) {
  // Vision TP 1 / DP 4 on GPUs 4-7 feeds an LLM with TP 2, PP 2 on GPUs 0-3; batch 4.
  const BoundaryPlan plan =
      plan_boundary(grid(1, 1, 1, 4, 4), grid(2, 1, 2, 1, 0), 4, kUnit, "vision");
  EXPECT_FALSE(plan.colocated);
  EXPECT_EQ(plan.kind, BoundaryKind::kFanIn);
  ASSERT_EQ(plan.forward.messages.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    const BoundaryMessage& m = plan.forward.messages[static_cast<size_t>(k)];
    EXPECT_EQ(m.src_gpu, 4 + k);
    EXPECT_EQ(m.dst_gpu, 0);  // the LLM's stage-0 leader
    EXPECT_DOUBLE_EQ(m.bytes, kUnit);
  }
  EXPECT_DOUBLE_EQ(plan.forward.message_bytes(), 4 * kUnit);  // the batch crosses once
  ASSERT_EQ(plan.forward.broadcasts.size(), 1u);
  EXPECT_EQ(plan.forward.broadcasts[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(plan.forward.broadcasts[0].bytes, 4 * kUnit);
  // Backward: the destination leader splits the gradient along the same intervals.
  ASSERT_EQ(plan.backward.messages.size(), 4u);
  EXPECT_EQ(plan.backward.messages[2].src_gpu, 0);
  EXPECT_EQ(plan.backward.messages[2].dst_gpu, 6);
  EXPECT_DOUBLE_EQ(plan.backward.message_bytes(), 4 * kUnit);
  EXPECT_TRUE(plan.backward.broadcasts.empty());  // the vision side has TP 1
  EXPECT_TRUE(plan.forward.allgathers.empty());
}

TEST(HeteroBoundary, NonColocatedFanOutSplitsAtTheSourceLeaderAndBroadcastsGradients) {
  // Vision TP 4 / DP 1 on GPUs 4-7 feeds an LLM with DP 4 on GPUs 0-3.
  const BoundaryPlan plan =
      plan_boundary(grid(4, 1, 1, 1, 4), grid(1, 1, 1, 4, 0), 4, kUnit, "vision");
  EXPECT_EQ(plan.kind, BoundaryKind::kFanOut);
  ASSERT_EQ(plan.forward.messages.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(plan.forward.messages[static_cast<size_t>(k)].src_gpu, 4);
    EXPECT_EQ(plan.forward.messages[static_cast<size_t>(k)].dst_gpu, k);
    EXPECT_DOUBLE_EQ(plan.forward.messages[static_cast<size_t>(k)].bytes, kUnit);
  }
  EXPECT_TRUE(plan.forward.broadcasts.empty());  // the LLM has TP 1
  // Backward: four gradient intervals concatenate at the vision leader, which broadcasts
  // the whole source shard to its TP group.
  EXPECT_DOUBLE_EQ(plan.backward.message_bytes(), 4 * kUnit);
  ASSERT_EQ(plan.backward.broadcasts.size(), 1u);
  EXPECT_EQ(plan.backward.broadcasts[0].gpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_DOUBLE_EQ(plan.backward.broadcasts[0].bytes, 4 * kUnit);
}

TEST(HeteroBoundary, UnequalTpChangesBroadcastDomainsNotTheNumberOfRankPairs) {
  // Fig 2's point: TP 4 -> TP 2 at equal DP is one leader pair, not a 4 x 2 exchange.
  const BoundaryPlan plan =
      plan_boundary(grid(4, 1, 1, 1, 4), grid(2, 1, 2, 1, 0), 4, kUnit, "vision");
  EXPECT_EQ(plan.kind, BoundaryKind::kEqual);
  ASSERT_EQ(plan.forward.messages.size(), 1u);
  EXPECT_EQ(plan.forward.messages[0].src_gpu, 4);
  EXPECT_EQ(plan.forward.messages[0].dst_gpu, 0);
  EXPECT_DOUBLE_EQ(plan.forward.messages[0].bytes, 4 * kUnit);
  ASSERT_EQ(plan.forward.broadcasts.size(), 1u);
  EXPECT_EQ(plan.forward.broadcasts[0].gpus.size(), 2u);
  ASSERT_EQ(plan.backward.broadcasts.size(), 1u);
  EXPECT_EQ(plan.backward.broadcasts[0].gpus.size(), 4u);
}

TEST(HeteroBoundary, ColocatedFanInIsALocalAllGatherPerDestinationShard) {
  // Table A3 "1B+7B 64K": encoder 1/1/1/32 and LLM 2/8/1/2 on GPUs 0-31, batch 4.
  const BoundaryPlan plan =
      plan_boundary(grid(1, 1, 1, 32, 0), grid(2, 8, 1, 2, 0), 4, kUnit, "vision");
  EXPECT_TRUE(plan.colocated);
  EXPECT_EQ(plan.kind, BoundaryKind::kFanIn);
  EXPECT_TRUE(plan.forward.messages.empty());  // nothing crosses rank sets
  ASSERT_EQ(plan.forward.allgathers.size(), 2u);
  for (int d = 0; d < 2; ++d) {
    const BoundaryGroup& g = plan.forward.allgathers[static_cast<size_t>(d)];
    ASSERT_EQ(g.gpus.size(), 16u);  // fan-in scale 32 / 2
    EXPECT_EQ(g.gpus.front(), 16 * d);
    EXPECT_EQ(g.gpus.back(), 16 * d + 15);
    EXPECT_DOUBLE_EQ(g.bytes, 2 * kUnit);  // every member ends with the B/2 shard
  }
  // Backward is interval selection: no communication at all.
  EXPECT_TRUE(plan.backward.messages.empty());
  EXPECT_TRUE(plan.backward.allgathers.empty());
}

TEST(HeteroBoundary, ColocatedFanInScaleTwoIsATwoRankAllGather) {
  // App. A.4: encoder DP 32, LLM DP 16 -> "each colocated bridge group is a 2-rank all-gather".
  const BoundaryPlan plan =
      plan_boundary(grid(1, 1, 1, 32, 0), grid(2, 1, 1, 16, 0), 32, kUnit, "vision");
  ASSERT_EQ(plan.forward.allgathers.size(), 16u);
  for (const BoundaryGroup& g : plan.forward.allgathers) {
    EXPECT_EQ(g.gpus.size(), 2u);
    EXPECT_DOUBLE_EQ(g.bytes, 2 * kUnit);
  }
  EXPECT_EQ(plan.forward.allgathers[3].gpus, (std::vector<int>{6, 7}));
}

TEST(HeteroBoundary, ColocatedFanOutSelectsForwardAndAllGathersGradients) {
  // Source TP 2 / DP 1, destination TP 1 / DP 2, on GPUs 0-1 (Fig 3, fan-out).
  const BoundaryPlan plan =
      plan_boundary(grid(2, 1, 1, 1, 0), grid(1, 1, 1, 2, 0), 4, kUnit, "vision");
  EXPECT_EQ(plan.kind, BoundaryKind::kFanOut);
  EXPECT_TRUE(plan.forward.messages.empty());
  EXPECT_TRUE(plan.forward.allgathers.empty());
  ASSERT_EQ(plan.backward.allgathers.size(), 1u);
  EXPECT_EQ(plan.backward.allgathers[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(plan.backward.allgathers[0].bytes, 4 * kUnit);  // the B source shard
  EXPECT_TRUE(plan.backward.messages.empty());
}

TEST(HeteroBoundary, ColocatedSameGridIsRankLocal) {
  // The homogeneous special case H: nothing to move in either direction.
  const BoundaryPlan plan =
      plan_boundary(grid(4, 8, 1, 1, 0), grid(4, 8, 1, 1, 0), 4, kUnit, "vision");
  EXPECT_EQ(plan.kind, BoundaryKind::kEqual);
  EXPECT_TRUE(plan.forward.messages.empty());
  EXPECT_TRUE(plan.forward.allgathers.empty());
  EXPECT_TRUE(plan.backward.messages.empty());
  EXPECT_TRUE(plan.backward.allgathers.empty());
}

TEST(HeteroBoundary, PartiallyOverlappingRankSetsAreAnInputErrorNamingTheModule) {
  try {
    plan_boundary(grid(1, 1, 1, 4, 2), grid(1, 1, 1, 4, 0), 4, kUnit, "parallel.modules.vision");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.modules.vision"), std::string::npos);
  }
}

}  // namespace
}  // namespace loom
