// Orders of the heterogeneous schedules (heterogeneous-parallelism-megatron §3.3, Fig 4,
// Fig 14, App. D).
#include "schedulers/hetero/hetero_order.hpp"

#include <gtest/gtest.h>

#include "core/index.hpp"

namespace loom {
namespace {

TEST(HeteroOrder, DistanceToSinkOfFigure4a) {
  // Encoder 1 with two PP stages, encoder 2 with one, the LLM with three (Fig 4a / Fig 14).
  const std::vector<StageGraphGroup> graph = {{2, {2}}, {1, {2}}, {3, {}}};
  const auto d = stages_to_sink(graph);
  EXPECT_EQ(d[0], (std::vector<int>{4, 3}));
  EXPECT_EQ(d[1], (std::vector<int>{3}));
  EXPECT_EQ(d[2], (std::vector<int>{2, 1, 0}));
}

TEST(HeteroOrder, GraphAware1F1BWarmsUpByDistanceAndRunsEveryMicrobatchOnce) {
  const std::vector<StageGraphGroup> graph = {{2, {2}}, {1, {2}}, {3, {}}};
  const int m = 6;
  const auto orders = graph_aware_1f1b(graph, m);
  const int expected_warmup[3][3] = {{4, 3, -1}, {3, -1, -1}, {2, 1, 0}};
  for (size_t g = 0; g < graph.size(); ++g) {
    for (const StageId s : orders[g].ids()) {
      const auto& order = orders[g][s];
      int warmup = 0;
      while (warmup < isize(order) && order[static_cast<size_t>(warmup)].pass == Pass::kF) ++warmup;
      // The leading run of forwards is the warmup plus the first steady-state forward.
      EXPECT_EQ(warmup, std::min(expected_warmup[g][s.slot()] + 1, m))
          << "group " << g << " stage " << s;
      PerMicrobatch<int> f(m, 0), b(m, 0);
      int live = 0, peak = 0;
      for (const StageAction& a : order) {
        (a.pass == Pass::kF ? f : b)[a.microbatch]++;
        live += a.pass == Pass::kF ? 1 : -1;
        peak = std::max(peak, live);
        EXPECT_GE(live, 0);
      }
      for (const MicrobatchId j : IdRange<MicrobatchId>(m)) {
        EXPECT_EQ(f[j], 1);
        EXPECT_EQ(b[j], 1);
      }
      // 1F1B's memory bound: at most distance + 1 microbatches alive.
      EXPECT_EQ(peak, std::min(expected_warmup[g][s.slot()] + 1, m));
    }
  }
}

TEST(HeteroOrder, LinearChainReducesToOrdinary1F1B) {
  const auto orders = graph_aware_1f1b({{4, {}}}, 8);
  for (int s = 0; s < 4; ++s) {
    const auto expected = one_f_one_b_order(4 - s - 1, 8);
    ASSERT_EQ(orders[0][StageId{s}].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(orders[0][StageId{s}][i].pass, expected[i].pass);
      EXPECT_EQ(orders[0][StageId{s}][i].microbatch, expected[i].microbatch);
    }
  }
}

TEST(HeteroOrder, ThreePhaseOrderRunsEncoderForwardThenLlmThenEncoderBackward) {
  const int m = 3;
  const auto steps = three_phase_order({0, 1}, 2, one_f_one_b_order(0, m), m);
  int phase = 1;
  int llm_steps = 0;
  for (const PhaseStep& s : steps) {
    const int p = static_cast<int>(s.phase);
    EXPECT_GE(p, phase) << "phases never go back";
    phase = p;
    if (s.phase == Phase::kLlm) {
      EXPECT_EQ(s.group, 2);
      ++llm_steps;
    } else if (!s.boundary) {
      EXPECT_EQ(s.action.pass, s.phase == Phase::kEncoderForward ? Pass::kF : Pass::kB);
    }
  }
  EXPECT_EQ(llm_steps, 2 * m);
  // Each encoder: m forwards and its forward transform; after the LLM: the backward
  // transform and m backwards, encoders in reverse order.
  EXPECT_EQ(steps.size(), static_cast<size_t>(2 * (m + 1) + 2 * m + 2 * (m + 1)));
  EXPECT_TRUE(steps[static_cast<size_t>(m)].boundary);
  EXPECT_EQ(steps[static_cast<size_t>(4 * m + 2)].group, 1);  // first phase-3 step
  EXPECT_TRUE(steps[static_cast<size_t>(4 * m + 2)].boundary);
}

TEST(HeteroOrder, PerMicrobatchOrderWrapsEachLlmPassInItsEncoders) {
  // Megatron-LM's single-grid order: the encoders' forwards (in topological order) right
  // before the LLM forward of the same microbatch, their backwards in reverse order right
  // after its LLM backward; no boundary steps.
  const auto steps = per_microbatch_order({0, 1}, 2, one_f_one_b_order(0, 2));
  std::vector<std::string> got;
  for (const PhaseStep& s : steps) {
    EXPECT_FALSE(s.boundary);
    got.push_back(std::to_string(s.group) + (s.action.pass == Pass::kF ? "F" : "B") +
                  std::to_string(s.action.microbatch.value()));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"0F0", "1F0", "2F0", "2B0", "1B0", "0B0", "0F1", "1F1",
                                           "2F1", "2B1", "1B1", "0B1"}));
}

}  // namespace
}  // namespace loom
