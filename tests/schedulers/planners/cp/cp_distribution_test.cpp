// Token distributions (dissertation §3.3.2.1): zigzag, LPT (Alg 1) and the exact ILP
// (Eq 3.4), contiguous (naive ring) and random (cornstarch-arxiv §5.3), and the
// qualitative claims of §3.5.4 / Table 3.4 on Loom's masks.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/errors.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

CpPlan plan(const MaskSpec& spec, int cp, CpDistribution d, double ilp_limit_s = 5) {
  CpPlanRequest request;
  request.cp = cp;
  request.distribution = d;
  request.ilp.time_limit_s = ilp_limit_s;
  return plan_cp(generate_mask(spec), request);
}

MaskSpec spec_of(MaskKind kind, std::int64_t seq, std::uint64_t seed = 1) {
  MaskSpec spec;
  spec.kind = kind;
  spec.seq = seq;
  spec.seed = seed;
  return spec;
}

TEST(CpDistribution, LptSortsDescendingAndBreaksTiesToTheLowestRank) {
  // Sorted (stable): 5(b1) 3(b0) 3(b3) 1(b2). 5 -> r0; 3 -> r1 (r1, r2 idle: lowest);
  // 3 -> r2; 1 -> r1 (loads 5, 3, 3: tie between r1 and r2 -> r1).
  EXPECT_EQ(lpt_owners({3, 5, 1, 3}, 3), (std::vector<int>{1, 0, 1, 2}));
  // All equal: round robin in sequence order.
  EXPECT_EQ(lpt_owners({2, 2, 2, 2, 2}, 2), (std::vector<int>{0, 1, 0, 1, 0}));
}

TEST(CpDistribution, LptIsDeterministic) {
  const MaskSpec spec = spec_of(MaskKind::kPacked, 32768);
  const CpPlan a = plan(spec, 8, CpDistribution::kLpt);
  const CpPlan b = plan(spec, 8, CpDistribution::kLpt);
  EXPECT_EQ(a.owner, b.owner);
  EXPECT_EQ(a.rank_workload, b.rank_workload);
}

TEST(CpDistribution, EveryQueryBlockIsOwnedExactlyOnce) {
  for (CpDistribution d : {CpDistribution::kZigzag, CpDistribution::kLpt, CpDistribution::kIlp,
                           CpDistribution::kContiguous, CpDistribution::kRandom}) {
    const CpPlan p = plan(spec_of(MaskKind::kEmbedded, 10000), 6, d, 1);
    ASSERT_EQ(p.owner.size(), p.block_workload.size());
    std::int64_t work = 0, tokens = 0;
    for (int r = 0; r < p.cp; ++r) {
      work += p.rank_workload[static_cast<std::size_t>(r)];
      tokens += p.rank_tokens[static_cast<std::size_t>(r)];
    }
    EXPECT_EQ(work, p.total_workload) << to_string(d);
    EXPECT_EQ(tokens, 10000) << to_string(d);
    for (int owner : p.owner) EXPECT_TRUE(owner >= 0 && owner < 6) << to_string(d);
  }
}

TEST(CpDistribution, ZigzagOwnsChunksIAndTwoGMinusOneMinusI) {
  // 8 blocks, 2 ranks: chunks of 2 blocks; rank 0 gets chunks 0 and 3.
  EXPECT_EQ(zigzag_owners(8, 2), (std::vector<int>{0, 0, 1, 1, 1, 1, 0, 0}));
}

TEST(CpDistribution, ZigzagBalancesCausalPerfectly) {
  const CpPlan p = plan(spec_of(MaskKind::kCausal, 65536), 8, CpDistribution::kZigzag);
  EXPECT_EQ(p.makespan, p.lower_bound);
  EXPECT_DOUBLE_EQ(p.imbalance(), 1.0);
}

TEST(CpDistribution, IlpFindsTheOptimumLptMisses) {
  // Graham's example: LPT gives 3+2+2 = 7, the optimum is 3+3 | 2+2+2 = 6.
  const std::vector<std::int64_t> w{3, 3, 2, 2, 2};
  CpPlanRequest request;
  request.cp = 2;
  request.distribution = CpDistribution::kLpt;
  EXPECT_EQ(plan_cp_from_workloads(w, 5 * 128, request).makespan, 7);
  const IlpResult ilp = ilp_owners(w, 2);
  EXPECT_EQ(ilp.makespan, 6);
  EXPECT_TRUE(ilp.optimal);
  EXPECT_EQ(ilp.lower_bound, 6);
}

TEST(CpDistribution, IlpProvesLptOptimalWhenNothingBetterExists) {
  const IlpResult ilp = ilp_owners({7, 5, 4, 3, 1}, 2);  // LPT: 7+3 | 5+4+1 = 10 = bound
  EXPECT_EQ(ilp.makespan, 10);
  EXPECT_TRUE(ilp.optimal);
}

// The four DCP masks of Table 3.4 at the 64k tokens on 8 GPUs: LPT within 5% of
// the ILP optimum, or of its proven bound (here LPT meets the bound, so GLPK never runs).
TEST(CpDistribution, LptWithinFivePercentOfTheIlpOnTable34Masks) {
  for (MaskKind kind : {MaskKind::kLambda, MaskKind::kCausal, MaskKind::kCausalBlockwise,
                        MaskKind::kSharedQuestion}) {
    const MaskSpec spec = spec_of(kind, 65536);
    const CpPlan lpt = plan(spec, 8, CpDistribution::kLpt);
    const CpPlan ilp = plan(spec, 8, CpDistribution::kIlp, 2);
    EXPECT_LE(ilp.makespan, lpt.makespan) << to_string(kind);
    EXPECT_LE(static_cast<double>(lpt.makespan), 1.05 * static_cast<double>(ilp.lower_bound))
        << to_string(kind);
  }
}

// Fig 3.5 and Table 3.4's non-causal families: LPT never loses to zigzag.
TEST(CpDistribution, LptNoWorseThanZigzagOnNonCausalMasks) {
  for (MaskKind kind : {MaskKind::kPrefix, MaskKind::kEmbedded, MaskKind::kPacked,
                        MaskKind::kLambda, MaskKind::kCausalBlockwise, MaskKind::kSharedQuestion}) {
    for (std::uint64_t seed : {1, 2, 3}) {
      for (int cp : {2, 4, 8}) {
        const MaskSpec spec = spec_of(kind, 65536, seed);
        EXPECT_LE(plan(spec, cp, CpDistribution::kLpt).makespan,
                  plan(spec, cp, CpDistribution::kZigzag).makespan)
            << to_string(kind) << " seed " << seed << " cp " << cp;
      }
    }
  }
}

TEST(CpDistribution, ZigzagIsImbalancedOnEmbeddedMasks) {
  // cornstarch-arxiv Fig 4b: zigzag's causal pairing does not balance multimodal masks.
  const CpPlan p = plan(spec_of(MaskKind::kEmbedded, 65536), 8, CpDistribution::kZigzag);
  EXPECT_GT(p.imbalance(), 1.05);
}

TEST(CpDistribution, LptMeetsGrahamsBound) {
  // §3.3.2.1: makespan <= sum(t_i) / G + t_max.
  const CpPlan p = plan(spec_of(MaskKind::kPacked, 65536), 8, CpDistribution::kLpt);
  const std::int64_t t_max = *std::max_element(p.block_workload.begin(), p.block_workload.end());
  EXPECT_LE(p.makespan, p.total_workload / 8 + t_max);
}

TEST(CpDistribution, IlpNodeLimitIsReproducibleAndKeepsAValidBound) {
  MaskSpec spec = spec_of(MaskKind::kEmbedded, 65536);
  const std::vector<std::int64_t> w = block_workloads(generate_mask(spec), BlockSizes{});
  IlpOptions options;
  options.node_limit = 50;
  options.time_limit_s = 600;
  const IlpResult a = ilp_owners(w, 8, options);
  const IlpResult b = ilp_owners(w, 8, options);
  EXPECT_EQ(a.owners, b.owners);
  EXPECT_EQ(a.lower_bound, b.lower_bound);
  EXPECT_LE(a.lower_bound, a.makespan);
  EXPECT_GE(a.lower_bound, makespan_lower_bound(w, 8));
  CpPlanRequest lpt;
  lpt.cp = 8;
  EXPECT_LE(a.makespan, plan_cp_from_workloads(w, 65536, lpt).makespan);
}

/// How many query blocks each of `cp` ranks owns.
std::vector<int> blocks_per_rank(const std::vector<int>& owners, int cp) {
  std::vector<int> count(static_cast<std::size_t>(cp), 0);
  for (int o : owners) ++count[static_cast<std::size_t>(o)];
  return count;
}

TEST(CpDistribution, ContiguousGivesEachRankOneRunInOrder) {
  EXPECT_EQ(contiguous_owners(10, 4), (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(contiguous_owners(3, 4), (std::vector<int>{1, 2, 3}));  // rank 0 gets none
  // On a causal mask the last run holds the heaviest rows: naive ring's imbalance.
  const CpPlan ring = plan(spec_of(MaskKind::kCausal, 65536), 8, CpDistribution::kContiguous);
  EXPECT_GT(ring.imbalance(), 1.7);  // the last run's load over the mean: (2G-1)/G = 15/8
  EXPECT_LT(ring.imbalance(), 1.9);
}

TEST(CpDistribution, RandomDealsEqualCountsAndIsDeterministicPerSeed) {
  // Pinned: mt19937_64 and a modulo give this draw with every standard library.
  EXPECT_EQ(random_owners(10, 4, 1), (std::vector<int>{1, 0, 3, 2, 0, 2, 0, 1, 1, 3}));
  const std::vector<int> a = random_owners(1001, 8, 7);
  EXPECT_EQ(a, random_owners(1001, 8, 7));
  EXPECT_NE(a, random_owners(1001, 8, 8));
  for (int n : blocks_per_rank(a, 8)) EXPECT_TRUE(n == 125 || n == 126) << n;
  // Not contiguous: the first 125 blocks do not all belong to one rank.
  EXPECT_GT(std::count_if(a.begin(), a.begin() + 125, [&](int o) { return o != a[0]; }), 50);
  // The seed reaches the plan through the request.
  CpPlanRequest request;
  request.cp = 8;
  request.distribution = CpDistribution::kRandom;
  request.random_seed = 7;
  const std::vector<std::int64_t> w(1001, 3);
  EXPECT_EQ(plan_cp_from_workloads(w, 1001 * 128, request).owner, a);
}

TEST(CpDistribution, RandomBalancesTheEmbeddedMaskBetterThanZigzagLptBest) {
  // cornstarch-arxiv §6.5: random and LPT balance non-causal masks that zigzag cannot.
  const MaskSpec spec = spec_of(MaskKind::kEmbedded, 65536);
  const std::int64_t zigzag = plan(spec, 8, CpDistribution::kZigzag).makespan;
  const std::int64_t random = plan(spec, 8, CpDistribution::kRandom).makespan;
  const std::int64_t lpt = plan(spec, 8, CpDistribution::kLpt).makespan;
  EXPECT_LT(random, zigzag);
  EXPECT_LT(lpt, random);
}

TEST(CpDistribution, BadNamesAndDegreesAreInputErrors) {
  EXPECT_THROW(parse_cp_distribution("ring"), InputError);
  EXPECT_THROW(lpt_owners({1, 2}, 0), InputError);
  EXPECT_EQ(parse_cp_distribution("ilp"), CpDistribution::kIlp);
  EXPECT_EQ(parse_cp_distribution("contiguous"), CpDistribution::kContiguous);
  EXPECT_EQ(parse_cp_distribution("random"), CpDistribution::kRandom);
  EXPECT_THROW(contiguous_owners(4, 0), InputError);
  EXPECT_THROW(random_owners(4, 0, 1), InputError);
}

}  // namespace
}  // namespace loom
