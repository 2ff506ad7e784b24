// ZB-V (zero-bubble PP, arXiv 2401.10241 §6; PyTorch ScheduleZBVZeroBubble): the orders
// written out by hand, the V placement, validity and the evaluator over a (p, m) sweep,
// the closed form for T_F = T_I = T_W per chunk, and peak activation memory against 1F1B.
//
// Memory formula asserted: with the 2p chunks of equal activation size A/(2p) (A = the
// whole model's activation bytes per microbatch), every ZB-V rank peaks at exactly 2p
// chunk-microbatches for m >= 2p-1, i.e. p x A/p bytes = 1F1B's rank-0 peak (p
// stage-microbatches of A/p), and at most min(2p, 2m) below that; so every rank's peak
// <= 1F1B's largest, min(p, m) x A/p.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "schedulers/llm/order_text.hpp"
#include "schedulers/llm/span_bubble.hpp"
#include "schedulers/llm/zero_bubble.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::order_text;

std::unique_ptr<Study> uniform(const std::string& scheduler, int pp, int m, int layers = 8,
                               std::vector<std::string> extra = {}) {
  return test::uniform_llm(scheduler, pp, m, layers, std::move(extra));
}

using test::max_span_bubble;

TEST(ZbV, OrdersForTwoRanksAndFourMicrobatchesByHand) {
  // Rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. Rank 0: 2p-1 = 3 F of chunk 0,
  // then p = 2 (F, I, W) of chunk 1; steady F0 I0 W0 F1 I1 W1; cool-down p (I0, W0).
  // Rank 1: 1 F0, one (F1, F0), one (F1, I1, W1); steady; cool-down (I0, I1), (I0, W0),
  // then the pending W1 and W0.
  const RankOrders orders = zb_v_orders(2, 4);
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 "
            "0I2 0W2 0I3 0W3");
  EXPECT_EQ(order_text(orders[PipelineRank{1}]),
            "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 "
            "1I3 1W2 2W3 1W3");
}

TEST(ZbV, FewerMicrobatchesThanTwoPMinusOneDropTheMissingOnes) {
  // PyTorch builds the order for max(2p-1, m) microbatches and drops the rest: p = 2,
  // m = 2 is the m = 3 order without microbatch 2.
  const RankOrders orders = zb_v_orders(2, 2);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]), "0F0 0F1 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 0I1 0W1");
  EXPECT_EQ(order_text(orders[PipelineRank{1}]), "1F0 2F0 1F1 2F1 2I0 2W0 1I0 1W0 2I1 2W1 1I1 1W1");
}

TEST(ZbV, StageRanksFormAV) {
  auto ranks = [](std::vector<int> values) {
    PerStage<PipelineRank> out;
    for (int v : values) out.push_back(PipelineRank{v});
    return out;
  };
  EXPECT_EQ(zb_v_stage_ranks(4), ranks({0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(zb_v_stage_ranks(1), ranks({0, 0}));
}

struct Case {
  int p, m;
};

class ZbVSweep : public ::testing::TestWithParam<Case> {};

TEST_P(ZbVSweep, ValidRunsAndKeepsOneFOneBsPeak) {
  const auto [p, m] = GetParam();
  const int layers = 2 * p * 2;  // two layers per chunk
  const auto zbv = uniform("zb-v", p, m, layers);
  const Schedule& s = zbv->schedule;
  ASSERT_NO_THROW(validate(s, zbv->config.model));
  ASSERT_EQ(s.num_ranks(), p);
  for (int r = 0; r < p; ++r) {
    std::set<int> stages;
    int computes = 0;
    for (const Op& op : s.programs[RankId{r}]) {
      if (const auto* c = std::get_if<Compute>(&op)) {
        stages.insert(c->stage.value());
        ++computes;
      }
    }
    EXPECT_EQ(stages, (std::set<int>{r, 2 * p - 1 - r})) << "rank " << r;
    EXPECT_EQ(computes, 2 * 3 * m) << "rank " << r;  // F, I, W of two chunks, m microbatches
  }
  const Timeline t = evaluate(s, zbv->config.cluster);
  const Metrics metrics = compute_metrics(s, t);
  // F = I = W = T per chunk (0.5 ms per layer, two layers).
  const double T = 1e-3;
  if (m >= 2 * p - 1) {
    EXPECT_NEAR(max_span_bubble(s, t), 0, 1e-12);
    EXPECT_NEAR(metrics.iteration_time_s, (6 * m + p - 1) * T, 1e-12);
  }
  const auto ofob = uniform("1f1b", p, m, layers);
  const auto zb_peaks = activation_peaks(s);
  const auto base_peaks = activation_peaks(ofob->schedule);
  const double chunk_bytes = 2 * 64.0 * 1024 * 1024;  // two layers of 64 MiB
  for (int r = 0; r < p; ++r) {
    const ActivationPeak& peak = zb_peaks[RankId{r}];
    if (m >= 2 * p - 1) {  // PyTorch's full order: 2p chunk-microbatches on every rank
      EXPECT_EQ(peak.microbatches, 2 * p) << "rank " << r;
      EXPECT_DOUBLE_EQ(peak.bytes, 2 * p * chunk_bytes) << "rank " << r;
    } else {  // fewer microbatches: the dropped ones leave the peak lower still
      EXPECT_LE(peak.microbatches, std::min(2 * p, 2 * m)) << "rank " << r;
    }
    EXPECT_LE(peak.bytes, base_peaks[0_rank].bytes) << "rank " << r;
  }
  EXPECT_DOUBLE_EQ(base_peaks[0_rank].bytes, std::min(p, m) * 2 * chunk_bytes);
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 3, 4, 7, 8, 12}) cases.push_back({p, m});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, ZbVSweep, ::testing::ValuesIn(sweep()), [](const auto& param_info) {
  return "p" + std::to_string(param_info.param.p) + "_m" + std::to_string(param_info.param.m);
});

TEST(ZbV, OnTheUniformExampleBeatsOneFOneBAtTheSamePeak) {
  // configs/examples/uniform-1f1b.toml: p = 4, m = 8, 8 layers (one per chunk), F 0.5 ms,
  // I = W = 0.5 ms per layer. 1F1B: (m+p-1)(F+B) per stage = 11 x 3 ms = 33 ms. ZB-V:
  // 6 m T + (p-1) T with T = 0.5 ms = 25.5 ms.
  const auto zbv =
      test::example("uniform-1f1b.toml", {"schedule.name=zb-v", "sim.backend=evaluator"});
  const auto ofob = test::example("uniform-1f1b.toml", {"sim.backend=evaluator"});
  const Metrics z = compute_metrics(zbv->schedule, evaluate(zbv->schedule, zbv->config.cluster));
  const Metrics b = compute_metrics(ofob->schedule, evaluate(ofob->schedule, ofob->config.cluster));
  EXPECT_NEAR(b.iteration_time_s, 33e-3, 1e-12);
  EXPECT_NEAR(z.iteration_time_s, 25.5e-3, 1e-12);
  // bubble_fraction = 1 - busy / (p x iteration) = 1 - 24 / 25.5 (1F1B: 1 - 24 / 33).
  EXPECT_NEAR(z.bubble_fraction, 1 - 24.0 / 25.5, 1e-9);
  EXPECT_LT(z.bubble_fraction, b.bubble_fraction / 4);
  double base_peak = 0;
  for (const RankMetrics& r : b.per_rank) base_peak = std::max(base_peak, r.peak_memory_bytes);
  for (const RankMetrics& r : z.per_rank) {
    EXPECT_EQ(r.peak_live_microbatches, 8);  // 2p chunk-microbatches on every rank
    EXPECT_DOUBLE_EQ(r.peak_memory_bytes, base_peak) << "rank " << r.rank;
  }
}

TEST(ZbV, TheLoopedSchedulersFlatChunksKeyLeavesItAlone) {
  // zb-v always runs two chunks in a V; an earlier release's flat schedule.chunks belongs to
  // the looped schedulers and no longer makes zb-v "not applicable" in a comparison.
  const auto plain = uniform("zb-v", 4, 8, 8);
  const auto flat = uniform("zb-v", 4, 8, 8, {"schedule.chunks=3"});
  EXPECT_TRUE(plain->schedule == flat->schedule);
}

TEST(ZbV, OptionsAndPerModuleLayoutsAreInputErrors) {
  try {
    uniform("zb-v", 2, 4, 8, {"schedule.zb-v.chunks=3"});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'schedule.zb-v.chunks': zb-v takes no options"),
              std::string::npos)
        << e.what();
  }
  try {
    prepare_study(test::source_path("configs/paper/hetero-llava-noncolocated.toml"),
                  {"schedule.name=zb-v"});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.modules"), std::string::npos) << e.what();
  }
  // 2p stages need 2p layers: the message names the scheduler and the largest valid pp.
  try {
    uniform("zb-v", 4, 8, 6);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("parallel.pp: zb-v"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.pp <= 3"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace loom
