// omnibal (omnibal seed §4): ISF balanced mini-batches, BMP partition, adaptive recompute.
#include "schedulers/variability/omnibal.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// Standard deviation of the groups' normalized load (vision / mean + text / mean).
double spread(const PerSample<SampleSize>& sizes,
              const std::vector<std::vector<SampleId>>& groups) {
  double tv = 0, tt = 0;
  for (const auto& s : sizes) tv += s.vision, tt += s.text;
  const double qv = tv / groups.size(), qt = tt / groups.size();
  std::vector<double> load;
  for (const auto& g : groups) {
    double v = 0, t = 0;
    for (const SampleId i : g) v += sizes[i].vision, t += sizes[i].text;
    load.push_back(v / qv + t / qt);
  }
  double mean = 0, var = 0;
  for (double l : load) mean += l / load.size();
  for (double l : load) var += (l - mean) * (l - mean) / load.size();
  return std::sqrt(var);
}

PerSample<SampleSize> skewed_sizes(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> vision(7.5, 0.8), text(6.0, 0.9);
  PerSample<SampleSize> out;
  for (int i = 0; i < n; ++i) out.push_back({std::round(vision(rng)), std::round(text(rng))});
  return out;
}

}  // namespace

// §4.1 / Table 5: balanced dynamic mini-batches cut the spread of per-mini-batch workload
// against in-order fixed-size batching; every sample exactly once, no empty group.
TEST(OmniBal, IsfReducesWorkloadSpreadVersusInOrderBatching) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const auto sizes = skewed_sizes(256, seed);
    const auto isf = isf_groups(sizes, 32, 10, seed);
    ASSERT_EQ(isf.size(), 32u);
    std::set<SampleId> seen;
    size_t total = 0;
    for (const auto& g : isf) {
      EXPECT_FALSE(g.empty());
      total += g.size();
      seen.insert(g.begin(), g.end());
    }
    EXPECT_EQ(total, 256u);
    EXPECT_EQ(seen.size(), 256u);
    std::vector<std::vector<SampleId>> in_order(32);
    for (int i = 0; i < 256; ++i) in_order[static_cast<size_t>(i / 8)].push_back(SampleId{i});
    EXPECT_LT(spread(sizes, isf), 0.5 * spread(sizes, in_order)) << seed;
    EXPECT_EQ(isf, isf_groups(sizes, 32, 10, seed));  // deterministic for a seed
  }
}

// §4.2: with r = 1 and N = 4 there are at most 3^3 candidates; the top one balances
// forward time at least as well as any other in the ranking; all are valid partitions.
TEST(OmniBal, BmpCandidatesAreValidAndRanked) {
  std::vector<double> fwd = {1, 1, 1, 4, 1, 1, 1, 1, 2, 2, 2, 2};
  std::vector<double> comm(fwd.size(), 1.0);
  const auto c = bmp_candidates(fwd, comm, 4, 1, 27);
  ASSERT_FALSE(c.empty());
  EXPECT_LE(c.size(), 27u);
  for (const auto& ranges : c) {
    ASSERT_EQ(ranges.size(), 4u);
    EXPECT_EQ(ranges.front().first, 0);
    EXPECT_EQ(ranges.back().end, 12);
    for (size_t s = 1; s < ranges.size(); ++s) {
      EXPECT_EQ(ranges[s].first, ranges[s - 1].end);
      EXPECT_LT(ranges[s].first, ranges[s].end);
    }
  }
  auto bottleneck = [&](const std::vector<StageRange>& r) {
    double worst = 0;
    for (const auto& s : r) {
      double sum = 0;
      for (int l = s.first; l < s.end; ++l) sum += fwd[static_cast<size_t>(l)];
      worst = std::max(worst, sum);
    }
    return worst;
  };
  EXPECT_LE(bottleneck(c.front()), bottleneck(c.back()));
}

// The scheduler end to end: valid, every sample once, microbatches of varying size.
TEST(OmniBal, ScheduleIsValidWithBalancedVariableMicrobatches) {
  auto study = test::example("vlm-frozen.toml", {"schedule.name=omnibal"});
  SchedulingProblem problem = study->problem;
  std::mt19937_64 rng(7);
  for (auto& s : problem.samples) s.tokens["vision"] = 500 + static_cast<int>(rng() % 8000);
  const Schedule s = find_scheduler("omnibal").generate(problem);
  validate(s, *problem.model);
  std::set<SampleId> seen;
  for (const auto& mb : s.samples.front()) seen.insert(mb.begin(), mb.end());
  EXPECT_EQ(seen.size(), problem.samples.size());
  EXPECT_GT(evaluate(s, study->config.cluster).iteration_time_s(), 0);
}

// §4.3: under a tighter memory budget adaptive recompute brings every rank under it,
// recomputes only on the stages that need it, and costs backward time.
TEST(OmniBal, AdaptiveRecomputeFitsTheBudgetOnlyWhereNeeded) {
  auto study = test::example("vlm-frozen.toml", {"schedule.name=omnibal"});
  const Schedule base = study->schedule;
  const auto peaks = activation_peaks(base);
  std::vector<double> need;
  for (int r = 0; r < base.num_ranks(); ++r)
    need.push_back(base.static_memory[RankId{r}].total() + peaks[RankId{r}].bytes);
  const double most = *std::max_element(need.begin(), need.end());
  const double least = *std::min_element(need.begin(), need.end());
  ASSERT_GT(most, least);
  const double cap = least + 0.5 * (most - least);
  Schedule s = base;
  const std::vector<int> layers = adaptive_recompute(s, study->problem, cap);
  const auto after = activation_peaks(s);
  int stages_recomputed = 0;
  for (int r = 0; r < s.num_ranks(); ++r) {
    EXPECT_LE(s.static_memory[RankId{r}].total() + after[RankId{r}].bytes, cap);
    if (layers[static_cast<size_t>(r)] > 0) ++stages_recomputed;
    if (need[static_cast<size_t>(r)] <= cap) {
      EXPECT_EQ(layers[static_cast<size_t>(r)], 0) << r;
    }
  }
  EXPECT_GT(stages_recomputed, 0);
  const Cluster& c = study->config.cluster;
  EXPECT_GT(evaluate(s, c).iteration_time_s(), evaluate(base, c).iteration_time_s());
}

}  // namespace loom
