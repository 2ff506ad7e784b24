// Entrain's hierarchical microbatch assignment (dissertation §4.3, §4.5, Algorithm 4).
#include "schedulers/variability/entrain_assign.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <numeric>
#include <random>
#include <set>

#include "core/index.hpp"

namespace loom {
namespace {

/// Sample ids written as literals.
std::vector<SampleId> ids(std::initializer_list<int> values) {
  std::vector<SampleId> out;
  for (const int v : values) out.emplace_back(v);
  return out;
}

/// Every sample of `w`, in order.
std::vector<SampleId> all_samples(const PerSample<SampleWork>& w) {
  std::vector<SampleId> all(w.size());
  std::iota(all.begin(), all.end(), SampleId{0});
  return all;
}

double max_llm(const PerSample<SampleWork>& w, const std::vector<std::vector<SampleId>>& mbs) {
  double m = 0;
  for (const auto& mb : mbs) m = std::max(m, llm_work(w, mb));
  return m;
}

/// Exact optimum of the bottleneck assignment by brute force: every bijection of the top
/// K/2 onto the bottom K/2, each pair deferring the subset (enumerated exactly) closest to
/// delta; the largest Eq 4.3 value minimized.
double brute_force_bottleneck(const PerSample<SampleWork>& w,
                              std::vector<std::vector<SampleId>> mbs) {
  std::stable_sort(mbs.begin(), mbs.end(),
                   [&](const auto& a, const auto& b) { return llm_work(w, a) > llm_work(w, b); });
  const size_t half = mbs.size() / 2;
  auto v = [&](const std::vector<SampleId>& ol, const std::vector<SampleId>& ul) {
    const double wi = llm_work(w, ol), wj = llm_work(w, ul), delta = (wi - wj) / 2;
    double best_d = 0;
    for (unsigned mask = 0; mask < (1u << ol.size()); ++mask) {
      double d = 0;
      for (size_t k = 0; k < ol.size(); ++k)
        if (mask & (1u << k)) d += w[ol[k]].llm;
      if (std::abs(delta - d) < std::abs(delta - best_d)) best_d = d;
    }
    return std::max(wi - best_d, wj + best_d);
  };
  std::vector<size_t> perm(mbs.size() - half);
  for (size_t j = 0; j < perm.size(); ++j) perm[j] = half + j;
  double best = 1e300;
  do {
    double worst = 0;
    for (size_t i = 0; i < half; ++i) worst = std::max(worst, v(mbs[i], mbs[perm[i]]));
    for (size_t j = half; j < perm.size(); ++j) worst = std::max(worst, llm_work(w, mbs[perm[j]]));
    best = std::min(best, worst);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

PerSample<SampleWork> random_batch(std::mt19937_64& rng, int n) {
  // Independent per-modality workloads (Fig 4.3): integers so exact ties are exact.
  std::uniform_int_distribution<int> enc(0, 12), llm(1, 20);
  PerSample<SampleWork> w;
  for (int i = 0; i < n; ++i) w.push_back({double(enc(rng)), double(llm(rng))});
  return w;
}

TEST(EntrainAssign, FindsThePerfectPairwiseBalance) {
  // In the spirit of Fig 4.8-4.10: six microbatches of equal encoder work whose LLM work
  // (8, 9, 7 | 4, 3, 5) can be levelled to 6 each only by deferring one or two samples
  // of each overloaded microbatch to the right partner.
  PerSample<SampleWork> w;
  std::vector<std::vector<SampleId>> mbs;
  for (const std::vector<double>& llm :
       std::vector<std::vector<double>>{{4, 2, 2}, {5, 3, 1}, {4, 2, 1}, {2, 2}, {3}, {5}}) {
    mbs.emplace_back();
    for (double x : llm) {
      mbs.back().push_back(w.next_id());
      w.push_back({3.0 / static_cast<double>(llm.size()), x});
    }
  }
  const DeferralPlan plan = pairwise_deferral(w, mbs);
  EXPECT_DOUBLE_EQ(plan.max_llm_before_s, 9);
  EXPECT_DOUBLE_EQ(plan.bottleneck_s, 6);
  for (const auto& mb : plan.llm) EXPECT_DOUBLE_EQ(llm_work(w, mb), 6);
  // Interleaved pairs: deferral only from an overloaded (even) to the next position.
  for (size_t j = 1; j < plan.deferred.size(); j += 2) EXPECT_TRUE(plan.deferred[j].empty());
  // The encoder schedule is untouched: the same microbatches, each with 3 units.
  for (const auto& mb : plan.encoder) EXPECT_DOUBLE_EQ(encoder_work(w, mb), 3);
}

TEST(EntrainAssign, BottleneckMatchingIsOptimalOnSmallBatches) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int k = 4 + 2 * (trial % 3);  // 4, 6, 8 microbatches
    const auto w = random_batch(rng, k * 4);
    const std::vector<SampleId> all = all_samples(w);
    const auto mbs = stratified_assignment(w, all, k);
    const DeferralPlan plan = pairwise_deferral(w, mbs);
    EXPECT_NEAR(plan.bottleneck_s, brute_force_bottleneck(w, mbs), 1e-9) << "trial " << trial;
  }
}

TEST(EntrainAssign, RandomBatchesKeepEncoderScheduleAndNeverRaiseTheMax) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int dp = 1 + trial % 4, k = 2 + trial % 9, n = dp * k * (1 + trial % 5);
    const auto w = random_batch(rng, n);
    const EntrainAssignment a = entrain_assign(w, dp, k);
    ASSERT_EQ(isize(a.replicas), dp);
    std::multiset<SampleId> enc_seen, llm_seen;
    const auto replicas = assign_replicas(w, dp);
    for (int d = 0; d < dp; ++d) {
      const DeferralPlan& p = a.replicas[ReplicaId{d}];
      ASSERT_EQ(isize(p.encoder), a.k_eff);
      // Never raises the largest microbatch LLM workload.
      EXPECT_LE(max_llm(w, p.llm), p.max_llm_before_s + 1e-9);
      EXPECT_LE(p.bottleneck_s, p.max_llm_before_s + 1e-9);
      // Never changes the encoder schedule: the stratified microbatches, reordered only.
      auto stratified = stratified_assignment(w, replicas[ReplicaId{d}], a.k_eff);
      auto executed = p.encoder;
      std::sort(stratified.begin(), stratified.end());
      std::sort(executed.begin(), executed.end());
      EXPECT_EQ(stratified, executed);
      for (size_t j = 0; j < p.encoder.size(); ++j) {
        for (const SampleId s : p.deferred[j])
          EXPECT_NE(std::find(p.encoder[j].begin(), p.encoder[j].end(), s), p.encoder[j].end());
        enc_seen.insert(p.encoder[j].begin(), p.encoder[j].end());
        llm_seen.insert(p.llm[j].begin(), p.llm[j].end());
      }
    }
    // Every sample exactly once, in the encoder and in the LLM microbatches.
    ASSERT_EQ(isize(enc_seen), n);
    ASSERT_EQ(enc_seen, llm_seen);
    EXPECT_EQ(std::set<SampleId>(enc_seen.begin(), enc_seen.end()).size(), static_cast<size_t>(n));
  }
}

TEST(EntrainAssign, EffectiveMicrobatchesFollowLine3) {
  // sum w_enc = 10, max = 4: floor(2.5) = 2 microbatches although 8 were asked for.
  const PerSample<SampleWork> w = {{4, 1}, {3, 1}, {2, 1}, {1, 1}};
  EXPECT_EQ(effective_microbatches(w, ids({0, 1, 2, 3}), 8), 2);
  EXPECT_EQ(effective_microbatches(w, ids({0, 1, 2, 3}), 1), 1);
  EXPECT_EQ(effective_microbatches(w, ids({0, 1, 2, 3}), 8, 3), 3);  // Loom's floor
  const PerSample<SampleWork> text_only = {{0, 1}, {0, 2}};
  EXPECT_EQ(effective_microbatches(text_only, ids({0, 1}), 2), 2);
}

TEST(EntrainAssign, StratifiedAssignmentBalancesEncoderWork) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    const auto w = random_batch(rng, 64);
    const std::vector<SampleId> all = all_samples(w);
    const int k = effective_microbatches(w, all, 16);
    const auto mbs = stratified_assignment(w, all, k);
    // Graham's LPT bound (2 - 1/K) against the lower bound max(mean, largest sample).
    double largest = 0;
    for (const auto& s : w) largest = std::max(largest, s.encoder);
    const double lower = std::max(encoder_work(w, all) / k, largest);
    for (const auto& mb : mbs) EXPECT_LE(encoder_work(w, mb), (2.0 - 1.0 / k) * lower + 1e-9);
    // Both strata reach every microbatch when there are enough fine samples.
    for (const auto& mb : mbs) EXPECT_GE(mb.size(), 2u);
  }
}

TEST(EntrainAssign, ReplicasGetEqualCountsAndLessLlmSpreadThanInOrder) {
  // §4.3: B/DP samples per replica; the least-LLM-so-far greedy balances LLM work better
  // than the in-order split every other scheduler uses (summed over 20 seeded batches).
  std::mt19937_64 rng(5);
  auto spread = [](const PerSample<SampleWork>& w, const PerReplica<std::vector<SampleId>>& rs) {
    double lo = 1e300, hi = 0;
    for (const auto& r : rs) {
      lo = std::min(lo, llm_work(w, r));
      hi = std::max(hi, llm_work(w, r));
    }
    return hi - lo;
  };
  double greedy = 0, in_order = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const auto w = random_batch(rng, 512);
    const auto replicas = assign_replicas(w, 4);
    PerReplica<std::vector<SampleId>> contiguous(4);
    for (int i = 0; i < 512; ++i) contiguous[ReplicaId{i / 128}].push_back(SampleId{i});
    std::set<SampleId> seen;
    for (const auto& r : replicas) {
      EXPECT_EQ(r.size(), 128u);
      seen.insert(r.begin(), r.end());
    }
    EXPECT_EQ(seen.size(), 512u);
    greedy += spread(w, replicas);
    in_order += spread(w, contiguous);
  }
  EXPECT_LT(greedy, in_order);
}

}  // namespace
}  // namespace loom
