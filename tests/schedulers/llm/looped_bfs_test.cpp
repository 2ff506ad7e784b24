// Breadth-first looped schedule (Lamy-Poirier MLSys'23; PyTorch ScheduleLoopedBFS): the
// orders written out by hand, the looped placement, validity over a (p, v, m) sweep, the
// closed form on equal chunk costs and GPipe's peak memory.
//
// Closed form (m >= p, per-chunk f and b, free links): a rank never waits inside its
// forward phase (chunk c of microbatch j needs stage c p + r - 1, done by
// (c p + r + j) f <= (r + c m + j) f), nor inside its backward phase (symmetric), so the
// iteration is (p - 1 + v m) f + (p - 1) b + v m b = (v m + p - 1)(f + b): bubble over
// ideal (p-1)/(v m), the same as Megatron's interleaved 1F1B.
#include <gtest/gtest.h>

#include <set>

#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "schedulers/llm/order_text.hpp"
#include "schedulers/llm/zero_bubble.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::order_text;

std::unique_ptr<Study> uniform(const std::string& scheduler, int pp, int m, int chunks,
                               int layers) {
  std::vector<std::string> overrides = {
      "schedule.name=" + scheduler, "parallel.pp=" + std::to_string(pp),
      "schedule.microbatches=" + std::to_string(m),
      "model.modules.llm.layers=" + std::to_string(layers), "sim.backend=evaluator"};
  if (chunks != 1)  // gpipe, 1f1b take no chunks option
    overrides.push_back("schedule." + scheduler + ".chunks=" + std::to_string(chunks));
  return test::example("uniform-1f1b.toml", overrides);
}

TEST(LoopedBfs, OrdersForTwoRanksTwoChunksFourMicrobatchesByHand) {
  // Chunk 0 of every microbatch, then chunk 1; backward chunk 1 then 0, each from the last
  // microbatch down (PyTorch's reversed(range(n_microbatches))).
  const RankOrders orders = looped_bfs_orders(2, 4, 2);
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]),
            "0F0 0F1 0F2 0F3 2F0 2F1 2F2 2F3 2B3 2B2 2B1 2B0 0B3 0B2 0B1 0B0");
  EXPECT_EQ(order_text(orders[PipelineRank{1}]),
            "1F0 1F1 1F2 1F3 3F0 3F1 3F2 3F3 3B3 3B2 3B1 3B0 1B3 1B2 1B1 1B0");
}

struct Case {
  int p, m, v;
};

class LoopedBfsSweep : public ::testing::TestWithParam<Case> {};

TEST_P(LoopedBfsSweep, ValidLoopedAndBubbleOverIdealIsPMinusOneOverVM) {
  const auto [p, m, v] = GetParam();
  const auto study = uniform("looped-bfs", p, m, v, p * v);  // one layer per chunk
  const Schedule& s = study->schedule;
  ASSERT_NO_THROW(validate(s, study->config.model));
  for (int r = 0; r < p; ++r) {
    std::set<int> stages, expected;
    for (const Op& op : s.programs[RankId{r}])
      if (const auto* c = std::get_if<Compute>(&op)) stages.insert(c->stage.value());
    for (int c = 0; c < v; ++c) expected.insert(c * p + r);
    EXPECT_EQ(stages, expected) << "rank " << r;
  }
  const Timeline t = evaluate(s, study->config.cluster);
  const Metrics metrics = compute_metrics(s, t);
  const double f = 0.5e-3, b = 1e-3;  // per chunk (one layer)
  if (m >= p) {
    EXPECT_NEAR(metrics.iteration_time_s, (v * m + p - 1) * (f + b), 1e-12);
  }
  // GPipe's memory: every forward of every chunk before any backward.
  for (const RankMetrics& r : metrics.per_rank) EXPECT_EQ(r.peak_live_microbatches, v * m);
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int p : {1, 2, 3, 4}) {
    for (int v : {1, 2, 3}) {
      for (int m : std::set<int>{1, p, 2 * p + 1}) cases.push_back({p, m, v});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, LoopedBfsSweep, ::testing::ValuesIn(sweep()),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param.p) + "_m" +
                                  std::to_string(param_info.param.m) + "_v" +
                                  std::to_string(param_info.param.v);
                         });

TEST(LoopedBfs, OnTheUniformExampleMatchesInterleavedWithMoreMemory) {
  // configs/examples/uniform-1f1b.toml with chunks = 2: p = 4, m = 8, 8 one-layer chunks.
  // Both take (v m + p - 1)(f + b) = 19 x 1.5 ms = 28.5 ms; looped-bfs keeps v m = 16
  // chunk-microbatches on every rank, interleaved-1f1b 11 on rank 0.
  const auto bfs = uniform("looped-bfs", 4, 8, 2, 8);
  const auto inter = uniform("interleaved-1f1b", 4, 8, 2, 8);
  const auto gpipe = uniform("gpipe", 4, 8, 1, 8);
  const Metrics a = compute_metrics(bfs->schedule, evaluate(bfs->schedule, bfs->config.cluster));
  const Metrics i =
      compute_metrics(inter->schedule, evaluate(inter->schedule, inter->config.cluster));
  const Metrics g =
      compute_metrics(gpipe->schedule, evaluate(gpipe->schedule, gpipe->config.cluster));
  EXPECT_NEAR(a.iteration_time_s, 28.5e-3, 1e-12);
  EXPECT_NEAR(a.iteration_time_s, i.iteration_time_s, 1e-12);
  EXPECT_NEAR(g.iteration_time_s, 33e-3, 1e-12);  // v = 1 is GPipe's (m + p - 1)(F + B)
  EXPECT_EQ(a.per_rank[0_rank].peak_live_microbatches, 16);
  EXPECT_EQ(i.per_rank[0_rank].peak_live_microbatches, 11);
  // Bytes: every layer of all 8 microbatches, as GPipe keeps (2 layers x 8 per stage).
  EXPECT_DOUBLE_EQ(activation_peaks(bfs->schedule)[0_rank].bytes,
                   activation_peaks(gpipe->schedule)[0_rank].bytes);
}

TEST(LoopedBfs, OneChunkIsGpipeWithBackwardsInReverse) {
  const auto bfs = uniform("looped-bfs", 4, 8, 1, 8);
  const auto gpipe = uniform("gpipe", 4, 8, 1, 8);
  EXPECT_NEAR(evaluate(bfs->schedule, bfs->config.cluster).iteration_time_s(),
              evaluate(gpipe->schedule, gpipe->config.cluster).iteration_time_s(), 1e-12);
}

}  // namespace
}  // namespace loom
