// Intra-GPU sub-block splitting (dissertation §3.3.2.2, Fig 3.3b) and the K/V all-gather
// of All-Gather CP (§3.4.3).
#include <gtest/gtest.h>

#include <numeric>

#include "core/errors.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

/// `cus` CUs, one head, 1 s per key block, `aggregation_s` per partial output.
IntraGpuOptions unit_cus(int cus, double aggregation_s = 0) {
  IntraGpuOptions o;
  o.compute_units = cus;
  o.block_time_s = 1;
  o.aggregation_time_s = aggregation_s;
  return o;
}

TEST(CpIntraGpu, SplitConservesWorkAndBoundsPieces) {
  for (std::int64_t w : {0, 1, 5, 31, 32, 33, 1000}) {
    for (std::int64_t s : {0, 1, 2, 16, 32}) {
      const std::vector<std::int64_t> pieces = split_row(w, s);
      EXPECT_EQ(std::accumulate(pieces.begin(), pieces.end(), std::int64_t{0}), w);
      if (s > 0) {
        for (std::int64_t p : pieces) EXPECT_LE(p, s);
        EXPECT_EQ(static_cast<std::int64_t>(pieces.size()), w > s ? (w + s - 1) / s : 1);
      }
    }
  }
}

TEST(CpIntraGpu, SplitIntoACountConservesWork) {
  EXPECT_EQ(split_row_into(10, 4), (std::vector<std::int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(split_row_into(3, 16), (std::vector<std::int64_t>{1, 1, 1}));
  EXPECT_EQ(split_row_into(0, 16), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(split_row_into(7, 0), (std::vector<std::int64_t>{7}));
  IntraGpuOptions both;
  both.sub_block = 2;
  both.sub_blocks_per_row = 2;
  EXPECT_THROW(intra_gpu_time_s({4}, both), InputError);
}

TEST(CpIntraGpu, SplittingRemovesTheStragglerOfFigure33b) {
  // GPU0 of Fig 3.3: b1 (1 block) and b5 (5 blocks) on two CUs.
  IntraGpuOptions o = unit_cus(2);
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({1, 5}, o), 5);  // CU1 runs b5 alone
  o.sub_block = 2;
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({1, 5}, o), 3);  // pieces 1 | 2 2 1 over two CUs
}

TEST(CpIntraGpu, AggregationCostsPerPartialAndHeadsRunInSequence) {
  IntraGpuOptions o = unit_cus(4, 0.5);
  o.sub_block = 4;
  // One row of 16 -> 4 partials of 4: compute 4, aggregation 4 x 0.5 / 4 CUs.
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({16}, o), 4.5);
  o.heads = 3;
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({16}, o), 13.5);
  // Without a split there is nothing to aggregate.
  o.sub_block = 0;
  o.heads = 1;
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({16}, o), 16);
}

TEST(CpIntraGpu, TooSmallSubBlocksCostMoreThanTheyBalance) {
  // The trade-off of §3.3.2.2: with a costly aggregation the finest split loses.
  IntraGpuOptions o = unit_cus(8, 4);
  const std::vector<std::int64_t> rows{64, 8, 8, 8, 8, 8, 8, 8};
  o.sub_block = 8;
  const double moderate = intra_gpu_time_s(rows, o);
  o.sub_block = 1;
  EXPECT_GT(intra_gpu_time_s(rows, o), moderate);
  o.sub_block = 0;
  EXPECT_GT(intra_gpu_time_s(rows, o), moderate);
}

TEST(CpIntraGpu, SubBlockOfCountsQueryBlocksInKeyBlocks) {
  // Fig 3.3b's sub-blocks of 2 square blocks: 2 x 128 keys = 8 key blocks of 32.
  EXPECT_EQ(sub_block_of(2, BlockSizes{}), 8);
  EXPECT_EQ(sub_block_of(16, BlockSizes{128, 128}), 16);
  EXPECT_THROW(sub_block_of(2, BlockSizes{128, 48}), InputError);
  EXPECT_THROW(sub_block_of(0, BlockSizes{}), InputError);
}

TEST(CpIntraGpu, OptionsFromTheGpuAndTheGroupTime) {
  const IntraGpuOptions o = intra_gpu_options(gpu_preset("A40"), {40, 8, 128}, BlockSizes{});
  EXPECT_EQ(o.compute_units, 84);
  EXPECT_EQ(o.heads_per_kernel, 5);
  EXPECT_DOUBLE_EQ(o.block_time_s, 4.0 * 128 * 32 * 128 / (149.7e12 / 84));
  GpuSpec unknown;
  unknown.name = "X1";
  EXPECT_THROW(intra_gpu_options(unknown, {40, 8, 128}, BlockSizes{}), InputError);
  // The group's time is its slowest rank's.
  CpPlanRequest request;
  request.cp = 2;
  request.distribution = CpDistribution::kZigzag;
  const CpPlan plan = plan_cp_from_workloads({1, 9, 9, 1}, 4 * 128, request);
  EXPECT_DOUBLE_EQ(cp_attention_time_s(plan, unit_cus(1)), 18);  // rank 1 owns 9 + 9
}

TEST(CpIntraGpu, KernelEfficiencySlowsKeyBlocksButNotTheAggregation) {
  const GpuSpec a40 = gpu_preset("A40");
  const IntraGpuOptions peak = intra_gpu_options(a40, {40, 8, 128}, BlockSizes{});
  const IntraGpuOptions slow = intra_gpu_options(a40, {40, 8, 128}, BlockSizes{}, 0.25);
  EXPECT_DOUBLE_EQ(slow.block_time_s, 4 * peak.block_time_s);
  EXPECT_DOUBLE_EQ(slow.aggregation_time_s, peak.aggregation_time_s);
  // Unsplit rows: the time scales by 1 / efficiency. Split rows: only the key blocks do,
  // so the aggregation weighs less against a slower kernel.
  const std::vector<std::int64_t> rows(200, 64);
  EXPECT_DOUBLE_EQ(intra_gpu_time_s(rows, slow), 4 * intra_gpu_time_s(rows, peak));
  IntraGpuOptions split_peak = peak, split_slow = slow;
  split_peak.sub_blocks_per_row = split_slow.sub_blocks_per_row = 16;
  const double aggregation_s = 200.0 * 5 * 16 * peak.aggregation_time_s / 84 * (40 / 5);
  EXPECT_NEAR(intra_gpu_time_s(rows, split_slow) - aggregation_s,
              4 * (intra_gpu_time_s(rows, split_peak) - aggregation_s), 1e-12);
  for (double bad : {0.0, -0.5, 1.5})
    EXPECT_THROW(intra_gpu_options(a40, {40, 8, 128}, BlockSizes{}, bad), InputError);
}

TEST(CpIntraGpu, ThreadBlockTimeIsPaidPerPiece) {
  // Two CUs, one head: rows 4 and 2 key blocks at 1 s each, 0.5 s per thread block.
  IntraGpuOptions o = unit_cus(2);
  o.thread_block_time_s = 0.5;
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({4, 2}, o), 4.5);  // CU0: 4 + 0.5, CU1: 2 + 0.5
  // Split into 2: pieces 2, 2, 1, 1 over two CUs, each paying 0.5: CU0 2.5 + 1.5, CU1 2.5 + 1.5.
  o.sub_blocks_per_row = 2;
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({4, 2}, o), 4.0);
  o.thread_block_time_s = -1;
  EXPECT_THROW(intra_gpu_time_s({4, 2}, o), InputError);
}

TEST(CpIntraGpu, BackwardListSchedulesOneThreadBlockPerKeyBlockInLaunchOrder) {
  // Two CUs, two heads one per kernel, 1 s per forward key block and 2.5 s per backward.
  IntraGpuOptions o = unit_cus(2);
  o.heads = 2;
  EXPECT_DOUBLE_EQ(backward_time_s({2, 1, 3}, o), 0);  // forward only
  o.backward_block_time_s = 2.5;
  // Per kernel, launch order: CU0 2, CU1 1 then 3 (it frees first): 4 key blocks, 10 s
  // (a sorted order would give 3 | 2 + 1, 7.5 s); two kernels.
  EXPECT_DOUBLE_EQ(backward_time_s({2, 1, 3}, o), 20);
  // Both heads in one kernel: 2 1 3 2 1 3 -> CU0 2, 2, 1 = 5; CU1 1, 3, 3 = 7: 17.5 s.
  o.heads_per_kernel = 2;
  EXPECT_DOUBLE_EQ(backward_time_s({2, 1, 3}, o), 17.5);
  o.heads_per_kernel = 1;
  // Each backward thread block pays the thread-block time: CU0 2 x 2.5 + 0.5 = 5.5;
  // CU1 1 x 2.5 + 0.5, then 3 x 2.5 + 0.5: 11 s per kernel.
  o.thread_block_time_s = 0.5;
  EXPECT_DOUBLE_EQ(backward_time_s({2, 1, 3}, o), 22);
  o.thread_block_time_s = 0;
  // A rank's time is its forward (query blocks 0 and 1, workloads 1 and 3: 3 s per kernel,
  // 6 s) plus its backward (20 s).
  CpPlanRequest request;
  request.cp = 1;
  const CpPlan plan = plan_cp_from_workloads({1, 3}, 2 * 128, request);
  const PerCpRank<std::vector<std::int64_t>> loads{{2, 1, 3}};
  EXPECT_DOUBLE_EQ(rank_attention_times_s(plan, o, &loads).total_s().front(), 26);
  EXPECT_DOUBLE_EQ(rank_attention_times_s(plan, o).total_s().front(), 6);
  const PerCpRank<std::vector<std::int64_t>> two_ranks{{2}, {1}};
  EXPECT_THROW(rank_attention_times_s(plan, o, &two_ranks), InputError);
  // From the GPU: a backward key block is 2.5x a forward one's FLOPs (FlashAttention-2).
  const GpuSpec a40 = gpu_preset("A40");
  EXPECT_EQ(intra_gpu_options(a40, {40, 8, 128}, BlockSizes{}).backward_block_time_s, 0);
  const IntraGpuOptions training = intra_gpu_options(a40, {40, 8, 128}, BlockSizes{}, 0.5, true);
  EXPECT_DOUBLE_EQ(training.backward_block_time_s, 2.5 * training.block_time_s);
  o.backward_block_time_s = -1;
  EXPECT_THROW(backward_time_s({1}, o), InputError);
}

TEST(CpIntraGpu, ResidentBlocksShareTheirCuFromLaunch) {
  // Rows of 3, 1, 1, 1 key blocks on 2 CUs. One at a time, the later rows go to the CU
  // that frees first: CU0 3, CU1 1 + 1 + 1, 3 s. Two resident per CU, all four start at
  // once, breadth first (CU0 rows 0 and 2, CU1 rows 1 and 3), and share their CU: CU0
  // runs both at half speed until the short row ends at 2 s, then the long one's last
  // 2 key blocks alone: 4 s.
  IntraGpuOptions o = unit_cus(2);
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({3, 1, 1, 1}, o), 3);
  o.blocks_per_cu = 2;
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({3, 1, 1, 1}, o), 4);
  // Work is conserved on a CU: one CU takes the total whatever the residency.
  o.compute_units = 1;
  EXPECT_DOUBLE_EQ(intra_gpu_time_s({3, 1, 1, 1}, o), 6);
  o.blocks_per_cu = 0;
  EXPECT_THROW(intra_gpu_time_s({1}, o), InputError);
}

TEST(CpIntraGpu, TheGroupWaitsForTheSlowestRankAtEachCollective) {
  // Two heads, one kernel each. Rank 0 owns the heavy row (forward 2 x 4 s), rank 1 the
  // heavy key-block loads (backward 2 x 2.5 x 3 s): alone the ranks take 8 + 5 and
  // 2 + 15 s. Each backward kernel ends in a reduce-scatter of dK/dV that every rank
  // joins, so the group waits for max(8 + 2.5, 2 + 7.5) s, then 7.5 s more: 18 s.
  CpPlanRequest request;
  request.cp = 2;
  request.distribution = CpDistribution::kContiguous;
  const CpPlan plan = plan_cp_from_workloads({4, 1}, 2 * 128, request);
  ASSERT_EQ(plan.owner, (std::vector<int>{0, 1}));
  IntraGpuOptions o = unit_cus(1);
  o.heads = 2;
  o.backward_block_time_s = 2.5;
  const PerCpRank<std::vector<std::int64_t>> loads{{1}, {3}};
  const RankAttentionTimes times = rank_attention_times_s(plan, o, &loads);
  EXPECT_EQ(times.forward_s, (std::vector<double>{8, 2}));
  EXPECT_EQ(times.backward_s, (std::vector<double>{5, 15}));
  EXPECT_EQ(times.backward_kernels, 2);
  EXPECT_EQ(times.total_s(), (std::vector<double>{13, 17}));
  EXPECT_DOUBLE_EQ(times.group_s(), 18);
  EXPECT_DOUBLE_EQ(cp_attention_time_s(plan, o, &loads), 18);
  // The forward alone: the slowest rank's.
  EXPECT_DOUBLE_EQ(cp_attention_time_s(plan, o), 8);
}

TEST(CpIntraGpu, InterOnlyBalanceLosesToZigzagOnACausalMaskFromTheCuTail) {
  // §3.5.4: LPT over query blocks without the split is 5-7 % slower than zigzag (Table 3.3)
  // because CUs idle at the end of each head's kernel (Fig 3.7). 64k causal tokens on 8
  // ranks: 512 rows of 4(b + 1) key blocks; both distributions give every rank the same
  // total, but LPT's rows leave a longer tail on 84 CUs with 4 heads per kernel.
  std::vector<std::int64_t> rows(512);
  for (std::size_t b = 0; b < rows.size(); ++b) rows[b] = 4 * static_cast<std::int64_t>(b + 1);
  auto time_s = [&](CpDistribution distribution, int sub_blocks) {
    CpPlanRequest request;
    request.cp = 8;
    request.distribution = distribution;
    const CpPlan plan = plan_cp_from_workloads(rows, 65536, request);
    EXPECT_EQ(plan.makespan, plan.total_workload / 8);
    IntraGpuOptions o = unit_cus(84, 0.5);  // a partial output costs half a key block
    o.heads = o.heads_per_kernel = 4;
    o.sub_blocks_per_row = sub_blocks;
    return cp_attention_time_s(plan, o);
  };
  const double zigzag = time_s(CpDistribution::kZigzag, 0), lpt = time_s(CpDistribution::kLpt, 0);
  EXPECT_GT(lpt, 1.03 * zigzag);
  EXPECT_LT(lpt, 1.10 * zigzag);
  // Split 16 ways, no row holds a CU up: the tail and LPT's loss go, aggregation paid.
  EXPECT_LT(time_s(CpDistribution::kLpt, 16), 1.01 * time_s(CpDistribution::kZigzag, 16));
  EXPECT_LT(time_s(CpDistribution::kZigzag, 16), zigzag);
}

Cluster two_nodes() {
  Cluster c;
  c.nodes = 2;
  c.gpus_per_node = 4;
  c.intra_node = {100e9, 2e-6};
  c.inter_node = {25e9, 5e-6};
  return c;
}

TEST(CpAllGather, EqualShardsCostGMinusOneSteps) {
  CpPlanRequest request;
  request.cp = 4;
  request.distribution = CpDistribution::kZigzag;
  const CpPlan plan = plan_cp_from_workloads(std::vector<std::int64_t>(8, 1), 8 * 128, request);
  const KvShape shape;  // 8 KV heads x 128 x bf16: 4 KiB per token for K and V
  const Cluster cluster = two_nodes();
  const AllGatherCost cost = kv_allgather_cost(plan, shape, cluster, {0, 1, 2, 3});
  const double shard = 256 * shape.bytes_per_token();
  for (int r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(cost.local_bytes[static_cast<std::size_t>(r)], shard);
    EXPECT_DOUBLE_EQ(cost.received_bytes[static_cast<std::size_t>(r)], 3 * shard);
  }
  EXPECT_NEAR(cost.time_s, 3 * transfer_time(cluster, 0, 1, shard), 1e-15);
  // Across nodes the slowest hop (IB) sets every step.
  const AllGatherCost spread = kv_allgather_cost(plan, shape, cluster, {0, 1, 4, 5});
  EXPECT_NEAR(spread.time_s, 3 * transfer_time(cluster, 1, 4, shard), 1e-15);
  EXPECT_THROW(kv_allgather_cost(plan, shape, cluster, {0, 1}), InputError);
}

}  // namespace
}  // namespace loom
