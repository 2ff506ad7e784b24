// Chimera (Li and Hoefler SC'21, arXiv 2107.06925 §3.1 Figure 3, §3.5): the p = 4 order of
// the paper's figure written out by hand, the two placements (down stage s on rank s, up
// stage s on rank p-1-s), validity and the evaluator over a (p, m) sweep with the paper's
// bubble (p-2)/(2m+p-2) for T_F = T_B, weights held twice (static memory) and the gradient
// all-reduce between the copies, and the p-even / m-multiple-of-p rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "schedulers/llm/order_text.hpp"
#include "schedulers/llm/zero_bubble.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::order_text;

/// Peak live stage-microbatches of rank r, whatever m: p/2 + 1 + min(r, p-1-r), between
/// p/2 + 1 (the end ranks) and p (the middle ones): the paper's Table 2 range
/// [(D/2 + 1) M_a, D M_a], against 1F1B's p - r.
int chimera_peak(int p, int r) {
  return p / 2 + 1 + std::min(r, p - 1 - r);
}

/// The uniform example with T_F = T_B = T = 0.5 ms per layer x layers / p.
std::unique_ptr<Study> uniform(const std::string& scheduler, int pp, int m, int layers,
                               int dp = 1) {
  return test::example(
      "uniform-1f1b.toml",
      {"schedule.name=" + scheduler, "parallel.pp=" + std::to_string(pp),
       "parallel.dp=" + std::to_string(dp), "schedule.microbatches=" + std::to_string(m),
       "model.modules.llm.layers=" + std::to_string(layers), "cost.table.llm.backward=0.5ms",
       "sim.backend=evaluator"});
}

TEST(Chimera, OrdersForFourRanksAndFourMicrobatchesAsInThePapersFigure) {
  // Figure 3 of the paper (D = 4, N = 4): microbatches 0 and 1 go down (stage s on rank s),
  // 2 and 3 up (stage s on rank 3-s); each pass one slot:
  //   slot:    0   1   2   3   4   5   6   7   8   9
  //   rank 0: 0F0  .  0F1 3F2 3B2 3F3 3B3 0B0  .  0B1
  //   rank 1:  .  1F0 2F2 1F1 2F3 2B2 1B0 2B3 1B1  .
  //   rank 2:  .  1F2 2F0 1F3 2F1 2B0 1B2 2B1 1B3  .
  //   rank 3: 0F2  .  0F3 3F0 3B0 3F1 3B1 0B2  .  0B3
  const RankOrders orders = chimera_orders(4, 4);
  ASSERT_EQ(orders.size(), 4u);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]), "0F0 0F1 3F2 3B2 3F3 3B3 0B0 0B1");
  EXPECT_EQ(order_text(orders[PipelineRank{1}]), "1F0 2F2 1F1 2F3 2B2 1B0 2B3 1B1");
  EXPECT_EQ(order_text(orders[PipelineRank{2}]), "1F2 2F0 1F3 2F1 2B0 1B2 2B1 1B3");
  EXPECT_EQ(order_text(orders[PipelineRank{3}]), "0F2 0F3 3F0 3B0 3F1 3B1 0B2 0B3");
}

TEST(Chimera, TwoUnitsAreConcatenatedTwoPSlotsApart) {
  // m = 8 on 4 ranks: microbatches 0..3 down, 4..7 up; unit 1 (down 2, 3; up 6, 7) starts
  // 2p = 8 slots after unit 0 and fills its tail (the paper's direct concatenation, §3.5).
  const RankOrders orders = chimera_orders(4, 8);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]),
            "0F0 0F1 3F4 3B4 3F5 3B5 0B0 0F2 0B1 0F3 3F6 3B6 3F7 3B7 0B2 0B3");
  EXPECT_EQ(order_text(orders[PipelineRank{3}]),
            "0F4 0F5 3F0 3B0 3F1 3B1 0B4 0F6 0B5 0F7 3F2 3B2 3F3 3B3 0B6 0B7");
}

struct Case {
  int p, m;
};

class ChimeraSweep : public ::testing::TestWithParam<Case> {};

TEST_P(ChimeraSweep, ValidRunsEachMicrobatchOnceInItsDirectionWithThePapersBubble) {
  const auto [p, m] = GetParam();
  const auto study = uniform("chimera", p, m, 2 * p);  // two layers per stage: T = 1 ms
  const Schedule& s = study->schedule;
  ASSERT_NO_THROW(validate(s, study->config.model));
  std::map<std::tuple<int, MicrobatchId, Pass>, int> runs;  // (stage, microbatch, pass) -> count
  for (int r = 0; r < p; ++r) {
    for (const Op& op : s.programs[RankId{r}]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c) continue;
      const bool up = c->microbatch >= MicrobatchId{m / 2};
      EXPECT_EQ(r, up ? p - 1 - c->stage.value() : c->stage.value())
          << to_string(op, s) << " on rank " << r;
      ++runs[{c->stage.value(), c->microbatch, c->pass}];
    }
  }
  EXPECT_EQ(runs.size(), static_cast<size_t>(2 * p * m));  // F and B of every stage x mb
  for (const auto& [key, n] : runs) EXPECT_EQ(n, 1);
  const Timeline t = evaluate(s, study->config.cluster);
  const Metrics metrics = compute_metrics(s, t);
  const double T = 1e-3;
  // Every rank computes 2m passes and idles p-2 slots (the paper's Table 2: bubble ratio
  // (p-2)/(2m+p-2), half of 1F1B's 2(p-1) slots, rounded down to p-2).
  EXPECT_NEAR(metrics.iteration_time_s, (2 * m + p - 2) * T, 1e-12) << "p " << p << " m " << m;
  EXPECT_NEAR(metrics.bubble_fraction, (p - 2.0) / (2 * m + p - 2), 1e-9);
  const auto peaks = activation_peaks(s);
  for (int r = 0; r < p; ++r)
    EXPECT_EQ(peaks[RankId{r}].microbatches, chimera_peak(p, r)) << "rank " << r;
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int p : {2, 4, 6}) {
    for (int k : {1, 2, 3}) cases.push_back({p, k * p});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, ChimeraSweep, ::testing::ValuesIn(sweep()),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param.p) + "_m" +
                                  std::to_string(param_info.param.m);
                         });

TEST(Chimera, RandomPAndMValidateAndMeetThePapersBubble) {
  // Seeded: p even 2-8, m = p x 1-4; dependencies, exactly-once and no deadlock.
  std::mt19937 rng(21);
  for (int trial = 0; trial < 12; ++trial) {
    const int p = 2 * std::uniform_int_distribution<int>(1, 4)(rng);
    const int m = p * std::uniform_int_distribution<int>(1, 4)(rng);
    const auto study = uniform("chimera", p, m, 2 * p);
    ASSERT_NO_THROW(validate(study->schedule, study->config.model)) << "p " << p << " m " << m;
    const Metrics metrics =
        compute_metrics(study->schedule, evaluate(study->schedule, study->config.cluster));
    EXPECT_NEAR(metrics.iteration_time_s, (2 * m + p - 2) * 1e-3, 1e-12) << "p " << p << " m " << m;
  }
}

TEST(Chimera, EveryRankHoldsTwoStagesAndAllReducesWithTheOtherCopy) {
  // vlm-frozen with a trainable LLM: parameters and gradients to hold and reduce.
  const std::vector<std::string> base = {"model.modules.llm.frozen=false", "parallel.pp=4",
                                         "schedule.microbatches=8", "sim.backend=evaluator"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), base.begin(), base.end());
    return test::example("vlm-frozen.toml", extra);
  };
  const auto chimera = with({"schedule.name=chimera"});
  const auto ofob = with({"schedule.name=1f1b"});
  const Schedule& s = chimera->schedule;
  ASSERT_NO_THROW(validate(s, chimera->config.model));
  const int p = 4;
  for (int r = 0; r < p; ++r) {
    // Rank r holds stage r (down) and stage p-1-r (up): 1F1B's ranks r and p-1-r together.
    const StaticMemory& mine = s.static_memory[RankId{r}];
    const StaticMemory& a = ofob->schedule.static_memory[RankId{r}];
    const StaticMemory& b = ofob->schedule.static_memory[RankId{p - 1 - r}];
    EXPECT_DOUBLE_EQ(mine.parameters, a.parameters + b.parameters) << "rank " << r;
    EXPECT_DOUBLE_EQ(mine.gradients, a.gradients + b.gradients) << "rank " << r;
    // One all-reduce at the end (before the optimizer step), between the two copies
    // (dp = 1: only them).
    const auto& program = s.programs[RankId{r}];
    ASSERT_TRUE(std::holds_alternative<OptimizerStep>(program.back())) << "rank " << r;
    const auto* c = std::get_if<Collective>(&program[program.size() - 2]);
    ASSERT_NE(c, nullptr) << "rank " << r;
    EXPECT_EQ(c->kind, CollectiveKind::kAllReduce);
    std::vector<RankId> group = s.group_members(c->group);
    std::sort(group.begin(), group.end());
    EXPECT_EQ(group, (std::vector<RankId>{RankId{std::min(r, p - 1 - r)},
                                          RankId{std::max(r, p - 1 - r)}}));
    EXPECT_DOUBLE_EQ(c->bytes, mine.gradients) << "rank " << r;
  }
  EXPECT_EQ(s.groups.size(), 2u);
  // With two replicas each group also spans the other replica's two copies.
  const auto dp2 = with({"schedule.name=chimera", "parallel.dp=2", "cluster.nodes=2"});
  ASSERT_NO_THROW(validate(dp2->schedule, dp2->config.model));
  EXPECT_EQ(dp2->schedule.groups.size(), 2u);
  for (const auto& g : dp2->schedule.groups) EXPECT_EQ(g.size(), 4u);
  EXPECT_EQ(dp2->schedule.groups[GroupId{0}],
            (std::vector<RankId>{0_rank, 3_rank, 4_rank, 7_rank}));
}

TEST(Chimera, OddPipelinesAndMicrobatchCountsOffTheUnitAreInputErrors) {
  EXPECT_EQ(chimera_error(4, 8), "");
  auto message = [](int p, int m) {
    try {
      uniform("chimera", p, m, 12);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string odd = message(3, 6);
  EXPECT_NE(odd.find("parallel.pp: chimera"), std::string::npos) << odd;
  EXPECT_NE(odd.find("even"), std::string::npos) << odd;
  EXPECT_NE(odd.find("use parallel.pp = 4 or 2"), std::string::npos) << odd;
  const std::string off = message(4, 6);
  EXPECT_NE(off.find("schedule.microbatches: chimera"), std::string::npos) << off;
  EXPECT_NE(off.find("use 4 or 8"), std::string::npos) << off;
  const std::string few = message(4, 2);
  EXPECT_NE(few.find("use 4"), std::string::npos) << few;
}

}  // namespace
}  // namespace loom
