// Random tokens (cornstarch-arxiv §5.3 as written): every token exactly once, workloads
// exact against testing every token pair, and what scattering tokens costs a block-sparse
// kernel on a causal mask.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/errors.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

CpPlanRequest request_of(int cp, std::int64_t query_block, std::int64_t key_block,
                         std::uint64_t seed = 1) {
  CpPlanRequest request;
  request.cp = cp;
  request.sizes = {query_block, key_block};
  request.distribution = CpDistribution::kRandomTokens;
  request.random_seed = seed;
  return request;
}

/// Each rank's tokens, rank 0's first, as the plan deals them (random_owners over tokens).
std::vector<std::int64_t> gathered_tokens(std::int64_t seq, int cp, std::uint64_t seed) {
  const std::vector<int> owner = random_owners(seq, cp, seed);
  std::vector<std::int64_t> gathered;
  for (int r = 0; r < cp; ++r)
    for (std::int64_t t = 0; t < seq; ++t)
      if (owner[static_cast<std::size_t>(t)] == r) gathered.push_back(t);
  return gathered;
}

/// The rows by testing every token pair of every (query block, key block).
std::vector<std::vector<KeyBlockRun>> brute_force_rows(const AttentionMask& mask,
                                                       const CpPlanRequest& request) {
  const std::vector<std::int64_t> gathered =
      gathered_tokens(mask.size(), request.cp, request.random_seed);
  const std::vector<int> owner = random_owners(mask.size(), request.cp, request.random_seed);
  const auto kb = static_cast<std::size_t>(request.sizes.key_block);
  std::vector<std::vector<KeyBlockRun>> rows;
  std::size_t first = 0;  // the rank's first token in `gathered`
  for (int r = 0; r < request.cp; ++r) {
    const auto count = static_cast<std::size_t>(std::count(owner.begin(), owner.end(), r));
    for (std::size_t q = 0; q < count; q += static_cast<std::size_t>(request.sizes.query_block)) {
      const std::size_t q_end =
          std::min(count, q + static_cast<std::size_t>(request.sizes.query_block));
      std::vector<KeyBlockRun> runs;
      for (std::size_t k = 0; k < gathered.size(); k += kb) {
        bool seen = false;
        for (std::size_t i = first + q; i < first + q_end && !seen; ++i)
          for (std::size_t j = k; j < std::min(gathered.size(), k + kb) && !seen; ++j)
            seen = mask.attends(gathered[i], gathered[j]);
        if (seen)
          append_run(runs, static_cast<std::int64_t>(k / kb), static_cast<std::int64_t>(k / kb));
      }
      rows.push_back(std::move(runs));
    }
    first += count;
  }
  return rows;
}

bool same_rows(const std::vector<std::vector<KeyBlockRun>>& a,
               const std::vector<std::vector<KeyBlockRun>>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](KeyBlockRun p, KeyBlockRun q) {
      return p.first == q.first && p.last == q.last;
    });
  });
}

TEST(CpRandomTokens, EveryTokenOnceInEqualCountsAndTheSameDrawPerSeed) {
  MaskSpec spec;
  spec.kind = MaskKind::kEmbedded;
  spec.seq = 1000;
  const AttentionMask mask = generate_mask(spec);
  const TokenDealtPlan a = plan_cp_random_tokens(mask, request_of(3, 64, 16, 5));
  EXPECT_EQ(a.plan.distribution, CpDistribution::kRandomTokens);
  EXPECT_EQ(a.plan.rank_tokens, (std::vector<std::int64_t>{334, 333, 333}));
  // 334 tokens in blocks of 64: 6 blocks (the last of 14), 333: 6; rank 0's first.
  EXPECT_EQ(a.plan.owner, (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(a.rows.size(), a.plan.owner.size());
  const TokenDealtPlan again = plan_cp_random_tokens(mask, request_of(3, 64, 16, 5));
  EXPECT_EQ(again.plan.block_workload, a.plan.block_workload);
  EXPECT_NE(plan_cp_random_tokens(mask, request_of(3, 64, 16, 6)).plan.block_workload,
            a.plan.block_workload);
  // plan_cp takes the same path.
  EXPECT_EQ(plan_cp(mask, request_of(3, 64, 16, 5)).block_workload, a.plan.block_workload);
}

TEST(CpRandomTokens, WorkloadsAreExactOnEveryMaskFamily) {
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kPrefix, MaskKind::kEmbedded,
                              MaskKind::kPacked, MaskKind::kLambda, MaskKind::kSharedQuestion}) {
    MaskSpec spec;
    spec.kind = kind;
    spec.seq = 700;
    spec.sink_tokens = 8;  // lambda: a window, so the merge of sorted positions is tested
    spec.window = 90;
    const AttentionMask mask = generate_mask(spec);
    const CpPlanRequest request = request_of(4, 32, 8, 3);
    const TokenDealtPlan dealt = plan_cp_random_tokens(mask, request);
    EXPECT_TRUE(same_rows(dealt.rows, brute_force_rows(mask, request))) << to_string(kind);
    std::int64_t total = 0;
    for (const auto& runs : dealt.rows)
      for (const KeyBlockRun& run : runs) total += run.last - run.first + 1;
    EXPECT_EQ(total, dealt.plan.total_workload) << to_string(kind);
  }
}

TEST(CpRandomTokens, ScatteredTokensCostABlockSparseKernelMoreOnACausalMask) {
  // Dealt by blocks, a causal mask's work is the closed form B(B+1)/2 key blocks of equal
  // size; dealt by tokens, a rank's query block spans G times as many positions, so the
  // diagonal band it half-covers widens: more work, but close to perfectly balanced.
  MaskSpec spec;
  spec.kind = MaskKind::kCausal;
  spec.seq = 16384;
  const AttentionMask mask = generate_mask(spec);
  CpPlanRequest by_blocks = request_of(8, 128, 128);
  by_blocks.distribution = CpDistribution::kLpt;
  const CpPlan lpt = plan_cp(mask, by_blocks);
  EXPECT_EQ(lpt.total_workload, 128 * 129 / 2);
  const TokenDealtPlan tokens = plan_cp_random_tokens(mask, request_of(8, 128, 128));
  EXPECT_GT(tokens.plan.total_workload, lpt.total_workload);
  // A rank's k-th query block spans positions near [1024 k, 1024 (k + 1)), as does every
  // rank's k-th key block: it sees the 8 (k + 1) key blocks up to its own band and, its
  // last position landing past some ranks' next key block's first, some of the 8 after:
  // per rank between 8 x (1 + ... + 16) = 1,088 and 8 x (2 + ... + 17) = 1,216 key
  // blocks, against 8,256 / 8 = 1,032 when whole blocks are dealt.
  const double ratio = static_cast<double>(tokens.plan.total_workload) / lpt.total_workload;
  EXPECT_GT(ratio, 1088.0 / 1032);
  EXPECT_LT(ratio, 1216.0 / 1032);
  EXPECT_LT(tokens.plan.imbalance(), 1.05);  // 16 alike blocks per rank
}

TEST(CpRandomTokens, PlanningFromWorkloadsAloneIsAnInputError) {
  CpPlanRequest request = request_of(2, 4, 4);
  EXPECT_THROW(plan_cp_from_workloads({1, 2, 3}, 12, request), InputError);
  EXPECT_EQ(parse_cp_distribution("random-tokens"), CpDistribution::kRandomTokens);
}

}  // namespace
}  // namespace loom
