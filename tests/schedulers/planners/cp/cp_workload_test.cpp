// Per-query-block workload W_b (dissertation Alg 1): closed forms and agreement with a
// brute-force count over token pairs.
#include <gtest/gtest.h>

#include <numeric>

#include "core/errors.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

/// Whether query block r and key block c hold a pair that attends: the definition.
bool block_visible(const AttentionMask& mask, const BlockSizes& sizes, std::int64_t r,
                   std::int64_t c) {
  const std::int64_t n = mask.size();
  for (std::int64_t q = r * sizes.query_block; q < std::min(n, (r + 1) * sizes.query_block); ++q)
    for (std::int64_t k = c * sizes.key_block; k < std::min(n, (c + 1) * sizes.key_block); ++k)
      if (mask.attends(q, k)) return true;
  return false;
}

/// W_b by testing every token pair: the definition, O(T^2).
std::vector<std::int64_t> brute_force(const AttentionMask& mask, const BlockSizes& sizes) {
  const std::int64_t n = mask.size();
  const std::int64_t rows = (n + sizes.query_block - 1) / sizes.query_block;
  const std::int64_t cols = (n + sizes.key_block - 1) / sizes.key_block;
  std::vector<std::int64_t> w(static_cast<std::size_t>(rows), 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      w[static_cast<std::size_t>(r)] += block_visible(mask, sizes, r, c);
  return w;
}

/// A mask of family `name` with every feature on (window, sinks, segments).
MaskSpec family_spec(const std::string& name, std::int64_t seq, std::int64_t window,
                     std::int64_t sinks) {
  MaskSpec spec;
  spec.kind = parse_mask_kind(name);
  spec.seq = seq;
  spec.window = window;
  spec.sink_tokens = sinks;
  spec.segments = 3;
  return spec;
}

TEST(CpWorkload, CausalRowBHasBPlusOneBlocksAtEqualBlockSizes) {
  MaskSpec spec;
  spec.seq = 64 * 100;
  const std::vector<std::int64_t> w = block_workloads(generate_mask(spec), {64, 64});
  ASSERT_EQ(w.size(), 100u);
  for (std::size_t b = 0; b < w.size(); ++b) EXPECT_EQ(w[b], static_cast<std::int64_t>(b) + 1);
}

TEST(CpWorkload, CausalRowBHasFourBPlusFourBlocksAtTheDefaultSizes) {
  MaskSpec spec;
  spec.seq = 128 * 50;
  const std::vector<std::int64_t> w = block_workloads(generate_mask(spec), BlockSizes{});
  for (std::size_t b = 0; b < w.size(); ++b) EXPECT_EQ(w[b], 4 * static_cast<std::int64_t>(b) + 4);
}

TEST(CpWorkload, FullyVisibleRowCountsEveryKeyBlockIncludingAShortLastOne) {
  // One encoder only, no causal bit: every token sees every token.
  const AttentionMask mask{std::vector<std::uint64_t>(1000, modality_bit(1)), 0};
  const std::vector<std::int64_t> w = block_workloads(mask, {128, 32});
  ASSERT_EQ(w.size(), 8u);                    // 7 full query blocks + 104 tokens
  for (std::int64_t x : w) EXPECT_EQ(x, 32);  // ceil(1000 / 32)
}

TEST(CpWorkload, MatchesBruteForceOnEveryMaskFamily) {
  for (const std::string& name : mask_kind_names()) {
    MaskSpec spec = family_spec(name, 1500, 200, 20);  // 1500: not a multiple of either block
    for (BlockSizes sizes : {BlockSizes{128, 32}, BlockSizes{50, 7}, BlockSizes{1, 1}}) {
      if (sizes.query_block == 1 && spec.seq > 600) spec.seq = 600;
      const AttentionMask mask = generate_mask(spec);
      const std::vector<std::int64_t> expected = brute_force(mask, sizes);
      for (WorkloadMethod method : {WorkloadMethod::kSegments, WorkloadMethod::kBitsets})
        EXPECT_EQ(block_workloads(mask, sizes, method), expected)
            << name << " " << sizes.query_block << "x" << sizes.key_block << " method "
            << static_cast<int>(method);
    }
  }
}

TEST(CpWorkload, WordsChangingEveryTokenAgreeWithBruteForce) {
  // A mask file can alternate words token by token (the bitset method's case), with
  // padding, sinks and a window mixed in.
  AttentionMask mask;
  std::uint64_t x = 12345;
  for (int i = 0; i < 700; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const std::uint64_t bits = (x >> 33) % 8;  // 0 = padding
    mask.words.push_back(bits | ((x >> 40) % 2 ? kCausalBit : 0) |
                         ((x >> 45) % 16 == 0 ? kSinkBit : 0));
  }
  for (std::int64_t window : {0, 37}) {
    mask.window = window;
    for (BlockSizes sizes : {BlockSizes{128, 32}, BlockSizes{20, 9}}) {
      const std::vector<std::int64_t> expected = brute_force(mask, sizes);
      EXPECT_EQ(block_workloads(mask, sizes, WorkloadMethod::kSegments), expected) << window;
      EXPECT_EQ(block_workloads(mask, sizes, WorkloadMethod::kBitsets), expected) << window;
      EXPECT_EQ(block_workloads(mask, sizes), expected) << window;
    }
  }
}

/// The key blocks of each row as one flag per (row, key block), from the runs.
std::vector<std::vector<bool>> flags_of(const std::vector<std::vector<KeyBlockRun>>& rows,
                                        std::int64_t key_blocks) {
  std::vector<std::vector<bool>> flags;
  for (const auto& runs : rows) {
    std::vector<bool>& row = flags.emplace_back(static_cast<std::size_t>(key_blocks), false);
    for (std::size_t i = 0; i < runs.size(); ++i) {
      EXPECT_LE(runs[i].first, runs[i].last);
      if (i > 0) {
        EXPECT_GT(runs[i].first, runs[i - 1].last + 1);  // sorted, disjoint, merged
      }
      for (std::int64_t k = runs[i].first; k <= runs[i].last; ++k)
        row[static_cast<std::size_t>(k)] = true;
    }
  }
  return flags;
}

TEST(CpWorkload, VisibleKeyBlocksAreTheBlocksTheWorkloadCounts) {
  // Both methods give the same runs, each row's runs are sorted, disjoint and merged, and
  // they hold exactly the key blocks with some attending token pair (brute force).
  for (const std::string& name : mask_kind_names()) {
    const AttentionMask mask = generate_mask(family_spec(name, 700, 90, 10));
    for (BlockSizes sizes : {BlockSizes{128, 32}, BlockSizes{50, 7}}) {
      const std::int64_t key_blocks = (mask.size() + sizes.key_block - 1) / sizes.key_block;
      const auto segments = visible_key_blocks(mask, sizes, WorkloadMethod::kSegments);
      const auto bitsets = visible_key_blocks(mask, sizes, WorkloadMethod::kBitsets);
      const auto flags = flags_of(segments, key_blocks);
      EXPECT_EQ(flags, flags_of(bitsets, key_blocks)) << name;
      for (std::size_t r = 0; r < flags.size(); ++r)
        for (std::int64_t k = 0; k < key_blocks; ++k)
          EXPECT_EQ(flags[r][static_cast<std::size_t>(k)],
                    block_visible(mask, sizes, static_cast<std::int64_t>(r), k))
              << name << " row " << r << " key block " << k;
    }
  }
}

TEST(CpWorkload, KeyBlockLoadsCountTheRanksRowsThatSeeEachKeyBlock) {
  // The backward's work per key block on a rank: brute force over the rank's rows, on every
  // mask family, more ranks than rows included; a rank's loads sum to its workload.
  for (const std::string& name : mask_kind_names()) {
    const AttentionMask mask = generate_mask(family_spec(name, 900, 90, 10));
    const BlockSizes sizes{128, 32};
    const std::int64_t key_blocks = (mask.size() + sizes.key_block - 1) / sizes.key_block;
    for (int cp : {1, 3, 9}) {
      CpPlanRequest request;
      request.cp = cp;
      request.sizes = sizes;
      request.distribution = CpDistribution::kLpt;
      const CpPlan plan =
          plan_cp_from_workloads(block_workloads(mask, sizes), mask.size(), request);
      const PerCpRank<std::vector<std::int64_t>> loads =
          key_block_loads(plan, visible_key_blocks(mask, sizes));
      for (int r = 0; r < cp; ++r) {
        const std::vector<std::int64_t>& load = loads[CpRank{r}];
        ASSERT_EQ(std::ssize(load), key_blocks) << name;  // every key block, seen or not
        for (std::int64_t k = 0; k < key_blocks; ++k) {
          std::int64_t seen = 0;
          for (std::size_t b = 0; b < plan.owner.size(); ++b)
            seen +=
                plan.owner[b] == r && block_visible(mask, sizes, static_cast<std::int64_t>(b), k);
          EXPECT_EQ(load[static_cast<std::size_t>(k)], seen)
              << name << " cp " << cp << " rank " << r << " key block " << k;
        }
        EXPECT_EQ(std::accumulate(load.begin(), load.end(), std::int64_t{0}),
                  plan.rank_workload[static_cast<std::size_t>(r)]);
      }
      const auto rows = visible_key_blocks(mask, sizes);
      EXPECT_THROW(key_block_loads(plan, {rows.begin(), rows.end() - 1}), InputError);
    }
  }
}

TEST(CpWorkload, BadBlockSizesAreInputErrors) {
  MaskSpec spec;
  spec.seq = 100;
  const AttentionMask mask = generate_mask(spec);
  EXPECT_THROW(block_workloads(mask, {0, 32}), InputError);
  EXPECT_THROW(block_workloads(mask, {128, 0}), InputError);
  EXPECT_THROW(block_workloads(AttentionMask{}, {128, 32}), InputError);
}

}  // namespace
}  // namespace loom
