// Closed-form checks of GPipe and 1F1B on the textbook config (configs/examples/
// uniform-1f1b.toml): 8 identical layers of F = 0.5 ms and B = 1.0 ms, free links.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "test_support.hpp"

namespace loom {

struct PipelineCase {
  std::string scheduler;
  int p;
  int m;
};

// Readable in ctest's test names ("1f1b p=4 m=8") instead of a byte dump.
void PrintTo(const PipelineCase& c, std::ostream* os) {
  *os << c.scheduler << " p=" << c.p << " m=" << c.m;
}

class UniformPipeline : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(UniformPipeline, IterationBubbleAndPeakActivationsFollowTheFormulas) {
  const auto& [name, p, m] = GetParam();
  const auto study = test::example("uniform-1f1b.toml",
                                   {"schedule.name=" + name, "parallel.pp=" + std::to_string(p),
                                    "schedule.microbatches=" + std::to_string(m)});
  const Timeline t = evaluate(study->schedule, study->config.cluster);
  const Metrics metrics = compute_metrics(study->schedule, t);
  const double stage_fb = 1.5e-3 * 8 / p;  // F + B of one stage
  EXPECT_NEAR(metrics.iteration_time_s, (m + p - 1) * stage_fb, 1e-12);
  EXPECT_NEAR(metrics.bubble_fraction, static_cast<double>(p - 1) / (m + p - 1), 1e-9);
  for (int s = 0; s < p; ++s) {
    const int expected = name == "gpipe" ? m : std::min(p - s, m);
    EXPECT_EQ(metrics.per_rank[RankId{s}].peak_live_microbatches, expected) << "stage " << s;
    EXPECT_DOUBLE_EQ(metrics.per_rank[RankId{s}].peak_memory_bytes,
                     expected * (8.0 / p) * 64 * 1024 * 1024);
  }
}

std::vector<PipelineCase> sweep() {
  std::vector<PipelineCase> cases;
  for (const char* name : {"gpipe", "1f1b"}) {
    for (int p : {1, 2, 4, 8}) {
      for (int m : {1, 3, 8, 16}) cases.push_back({name, p, m});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, UniformPipeline, ::testing::ValuesIn(sweep()),
                         [](const auto& param_info) {
                           return param_info.param.scheduler + "_p" +
                                  std::to_string(param_info.param.p) + "_m" +
                                  std::to_string(param_info.param.m);
                         });

TEST(UniformPipeline, ExampleReports33Milliseconds) {
  const auto study = test::example("uniform-1f1b.toml");
  EXPECT_NEAR(evaluate(study->schedule, study->config.cluster).iteration_time_s(), 0.033, 1e-12);
}

TEST(UniformPipeline, OneFOneBWarmupIsPMinusSMinusOneForwards) {
  const auto study = test::example("uniform-1f1b.toml");
  const Schedule& s = study->schedule;
  for (int stage = 0; stage < 4; ++stage) {
    int forwards_before_first_backward = 0;
    for (const Op& op : s.programs[RankId{stage}]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c) continue;
      if (c->pass != Pass::kF) break;
      ++forwards_before_first_backward;
    }
    // Warm-up forwards plus the first steady-state forward.
    EXPECT_EQ(forwards_before_first_backward, 4 - stage - 1 + 1) << "stage " << stage;
  }
}

TEST(DataParallel, ReplicasAllReduceTrainableGradientsAtTheEnd) {
  const auto study =
      test::example("uniform-1f1b.toml", {"parallel.dp=2", "cost.table.llm.parameters=1e6"});
  const Schedule& s = study->schedule;
  ASSERT_EQ(s.num_ranks(), 8);
  ASSERT_EQ(s.groups.size(), 4u);
  for (int r = 0; r < 8; ++r) {
    const auto* c = std::get_if<Collective>(&s.programs[RankId{r}].back());
    ASSERT_NE(c, nullptr) << "rank " << r;
    EXPECT_DOUBLE_EQ(c->bytes, 2 * 1e6 * 4);  // 2 layers per stage x fp32 gradients
  }
  // Samples 0..15 are split between the replicas, each exactly once.
  std::vector<SampleId> ids;
  for (const auto& replica : s.samples) {
    for (const auto& mb : replica) ids.insert(ids.end(), mb.begin(), mb.end());
  }
  std::sort(ids.begin(), ids.end());
  std::vector<SampleId> expected(16);
  std::iota(expected.begin(), expected.end(), SampleId{0});
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(s.samples_of(ReplicaId{1}, MicrobatchId{0}).front(), SampleId{8});
  // Stage 0 finishes last, at 33 ms; its two-member ring then streams 2 x 4 MB over the
  // latency-free 300 GB/s NVLink.
  const double t = evaluate(s, study->config.cluster).iteration_time_s();
  EXPECT_NEAR(t, 0.033 + 8e6 / 300e9, 1e-12);
}

TEST(MultiInputModel, TwoEncodersFeedingOneLlmPlanAndRunForAnyPartition) {
  // Each of these used to fail: messages of the two encoder edges crossed between a pair
  // of stages in different orders, or a stage forwarding one producer's activations was
  // required to hold both.
  const std::vector<std::vector<std::string>> layouts = {
      {"parallel.pp=5", "cluster.gpus_per_node=8"},
      {"parallel.pp=5", "cluster.gpus_per_node=8", "schedule.partition_view=naive"},
      {"parallel.pp=2", "schedule.stage_layers=[58, 16]"},
      {"parallel.pp=3", "schedule.stage_layers=[33, 25, 16]"},
  };
  for (const auto& overrides : layouts) {
    const auto study = test::fixture("two-encoders.toml", overrides);  // validates
    const Timeline t = evaluate(study->schedule, study->config.cluster);
    EXPECT_GT(t.iteration_time_s(), 0) << overrides.back();
  }
  // Both projectors' activations reach the LLM's first layer (layer 58) on separate edges.
  const auto study =
      test::fixture("two-encoders.toml", {"parallel.pp=2", "schedule.stage_layers=[58, 16]"});
  std::set<int> producers;
  for (const Op& op : study->schedule.programs[1_rank]) {
    if (const auto* r = std::get_if<Recv>(&op);
        r && r->tag.pass == Pass::kF && r->tag.microbatch == MicrobatchId{0}) {
      EXPECT_EQ(r->tag.boundary_layer, 58);
      producers.insert(r->tag.producer());
    }
  }
  EXPECT_EQ(producers.size(), 2u);
}

}  // namespace loom
