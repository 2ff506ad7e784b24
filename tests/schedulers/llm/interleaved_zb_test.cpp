// Interleaved zero bubble (PyTorch ScheduleInterleavedZeroBubble, ZB1P of zero-bubble PP on
// the looped placement): the orders written out by hand from PyTorch's rules, v = 1 being
// zb-h1, PyTorch's rounds rule as exit 2, and random (p, v, m): valid (each microbatch once
// per chunk for F, I and W, dependencies, no cycle of waits), on the looped placement, with
// the unit-time closed form.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>

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

/// uniform-1f1b.toml (F = I = W = 0.5 ms per layer, free links) with one layer per stage.
std::unique_ptr<Study> uniform(const std::string& scheduler, int pp, int m, int chunks,
                               std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "schedule.name=" + scheduler, "parallel.pp=" + std::to_string(pp),
      "schedule.microbatches=" + std::to_string(m),
      "model.modules.llm.layers=" + std::to_string(pp * chunks), "sim.backend=evaluator"};
  if (chunks != 1)  // zb-h1 and 1f1b take no chunks option
    overrides.push_back("schedule." + scheduler + ".chunks=" + std::to_string(chunks));
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return test::example("uniform-1f1b.toml", overrides);
}

TEST(InterleavedZb, OrdersForTwoRanksTwoChunksFourMicrobatchesByHand) {
  // PyTorch: rounds = max(1, 4 div 2) = 2 of R = 2 microbatches; chunk of virtual
  // microbatch k = (k div 2) mod 2. Rank 0 (stages 0, 2) warms up with (v-1)R + p-1-r = 3
  // forwards and runs each W right after its I; rank 1 (stages 1, 3) with 2 forwards and
  // one W deferred (r = 1), drained last.
  const RankOrders orders = interleaved_zb_orders(2, 4, 2);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]),
            "0F0 0F1 2F0 2F1 2I0 2W0 0F2 2I1 2W1 0F3 0I0 0W0 2F2 0I1 0W1 2F3 2I2 2W2 2I3 2W3 "
            "0I2 0W2 0I3 0W3");
  EXPECT_EQ(order_text(orders[PipelineRank{1}]),
            "1F0 1F1 3F0 3I0 3F1 3I1 3W0 1F2 1I0 3W1 1F3 1I1 1W0 3F2 3I2 1W1 3F3 3I3 3W2 1I2 "
            "3W3 1I3 1W2 1W3");
}

TEST(InterleavedZb, OneChunkIsZbH1) {
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 3, 4, 5, 8, 12}) {
      if (m % std::max(1, m / p) != 0) continue;
      const RankOrders orders = interleaved_zb_orders(p, m, 1);
      const StageOrders h1 = zb_h1_orders(p, m);
      for (int r = 0; r < p; ++r) {
        std::vector<RankAction> expected;
        for (const StageAction& a : h1[StageId{r}])
          expected.push_back({.stage = StageId{r}, .pass = a.pass, .microbatch = a.microbatch});
        EXPECT_EQ(order_text(orders[PipelineRank{r}]), order_text(expected))
            << "p " << p << " m " << m << " rank " << r;
      }
    }
  }
}

TEST(InterleavedZb, RoundsThatDoNotDivideAreInputErrorsNamingTheNearestCounts) {
  // 9 on 4 ranks: 2 rounds of 4.5. 8 and 10 both divide into their 2 rounds.
  EXPECT_EQ(interleaved_zb_round_size(4, 8), 4);
  EXPECT_EQ(interleaved_zb_round_size(4, 10), 5);
  EXPECT_EQ(interleaved_zb_round_size(4, 3), 3);  // fewer than p: one round
  EXPECT_EQ(interleaved_zb_round_size(4, 6), 6);
  try {
    uniform("interleaved-zb", 4, 9, 2);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(": schedule.microbatches: interleaved-zb"), std::string::npos) << what;
    EXPECT_NE(what.find("use schedule.microbatches = 8 (or 10)"), std::string::npos) << what;
  }
  try {  // its groups are PyTorch's rounds: interleaved-1f1b's grouping is not its option
    uniform("interleaved-zb", 2, 4, 2, {"schedule.interleaved-zb.microbatch_group_size=2"});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("interleaved-zb has no option 'microbatch_group_size'"),
              std::string::npos)
        << e.what();
  }
  try {  // 2 x 3 virtual stages need 6 layers
    test::example("uniform-1f1b.toml",
                  {"schedule.name=interleaved-zb", "parallel.pp=2",
                   "schedule.interleaved-zb.chunks=3", "model.modules.llm.layers=5"});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("chunks per rank = 6 pipeline stages"), std::string::npos)
        << e.what();
  }
}

struct Case {
  int p, v, m;
};

void expect_valid_and_closed_form(const Case& c) {
  const auto [p, v, m] = c;
  const std::string what =
      "p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m);
  const RankOrders orders = interleaved_zb_orders(p, m, v);
  for (int r = 0; r < p; ++r) {
    std::set<std::tuple<int, int, MicrobatchId>> seen;
    for (const RankAction& a : orders[PipelineRank{r}]) {
      EXPECT_EQ(a.stage.value() % p, r) << what;
      EXPECT_TRUE(seen.insert({a.stage.value(), static_cast<int>(a.pass), a.microbatch}).second)
          << what;
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(3 * m * v)) << what;  // F, I, W per chunk
  }
  const auto study = uniform("interleaved-zb", p, m, v);
  const Schedule& s = study->schedule;
  ASSERT_NO_THROW(validate(s, study->config.model)) << what;
  const Timeline t = evaluate(s, study->config.cluster);
  const double T = 0.5e-3;  // F = I = W per chunk (one layer)
  // Closed form (F = I = W = T per chunk, free links, m >= p): each rank works 3 m v T and
  // idles (p-1)(T_F + T_I - T_W) = (p-1) T inside its span, ZB-H1's bubble whatever v; the
  // iteration is (3 m v + p - 1) T. For m < p the ranks also wait between chunks.
  if (m >= p) {
    EXPECT_NEAR(t.iteration_time_s(), (3 * m * v + p - 1) * T, 1e-12) << what;
    EXPECT_NEAR(test::max_span_bubble(s, t), (p - 1) * T, 1e-12) << what;
  }
  // Every rank peaks at its warm-up + 1 + its r deferred W = (v-1) R + p chunk-microbatches
  // (interleaved 1F1B's rank 0: 2(p-1) + (v-1) R + 1).
  const int round = interleaved_zb_round_size(p, m);
  const Metrics metrics = compute_metrics(s, t);
  for (int r = 0; r < p; ++r) {
    if (m >= p) {
      EXPECT_EQ(metrics.per_rank[RankId{r}].peak_live_microbatches,
                std::min(m * v, (v - 1) * round + p))
          << what << " rank " << r;
    }
  }
  EXPECT_GT(t.iteration_time_s(), 0) << what;
}

TEST(InterleavedZb, RandomPVMValidLoopedAndClosedForm) {
  std::mt19937 rng(1515);
  int ran = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int p = std::uniform_int_distribution<int>(1, 4)(rng);
    const int v = std::uniform_int_distribution<int>(1, 3)(rng);
    const int m = std::uniform_int_distribution<int>(1, 4 * p)(rng);
    if (m % std::max(1, m / p) != 0) {
      EXPECT_THROW(interleaved_zb_orders(p, m, v), InputError);
      continue;
    }
    ++ran;
    expect_valid_and_closed_form({p, v, m});
  }
  EXPECT_GE(ran, 25);
}

TEST(InterleavedZb, OnTheUniformExampleBeatsInterleavedOneFOneBWithLessMemory) {
  // configs/examples/uniform-1f1b.toml with chunks = 2: p = 4, m = 8, 8 layers (one per
  // chunk), F = I = W = T = 0.5 ms. interleaved-zb: (3 m v + p - 1) T = 51 T = 25.5 ms, 8
  // chunk-microbatches on every rank ((v-1) R + p, R = 4); interleaved-1f1b: (m v + p - 1)
  // (F + B) = 19 x 1.5 ms = 28.5 ms, 11 on rank 0.
  const std::vector<std::string> two = {"schedule.interleaved-zb.chunks=2",
                                        "schedule.interleaved-1f1b.chunks=2",
                                        "sim.backend=evaluator"};
  auto with = [&](const std::string& name) {
    std::vector<std::string> o = two;
    o.push_back("schedule.name=" + name);
    const auto study = test::example("uniform-1f1b.toml", o);
    return compute_metrics(study->schedule, evaluate(study->schedule, study->config.cluster));
  };
  const Metrics zb = with("interleaved-zb");
  const Metrics il = with("interleaved-1f1b");
  EXPECT_NEAR(zb.iteration_time_s, 25.5e-3, 1e-12);
  EXPECT_NEAR(il.iteration_time_s, 28.5e-3, 1e-12);
  EXPECT_NEAR(zb.bubble_fraction, 1 - 24.0 / 25.5, 1e-9);
  for (const RankMetrics& r : zb.per_rank) EXPECT_EQ(r.peak_live_microbatches, 8);
  EXPECT_EQ(il.per_rank[0_rank].peak_live_microbatches, 11);
}

}  // namespace
}  // namespace loom
