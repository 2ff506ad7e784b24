#include "schedulers/planners/partition/partition.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/index.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

double bottleneck(const std::vector<double>& costs, const std::vector<StageRange>& ranges) {
  double worst = 0;
  for (const StageRange& r : ranges) {
    double sum = 0;
    for (int l = r.first; l < r.end; ++l) sum += costs[static_cast<size_t>(l)];
    worst = std::max(worst, sum);
  }
  return worst;
}

/// Exhaustive minimum bottleneck over all ways to cut n layers into k non-empty stages.
double brute_force(const std::vector<double>& costs, int k, int first = 0) {
  const int n = isize(costs);
  if (k == 1) {
    double sum = 0;
    for (int l = first; l < n; ++l) sum += costs[static_cast<size_t>(l)];
    return sum;
  }
  double best = 1e300, prefix = 0;
  for (int end = first + 1; end <= n - (k - 1); ++end) {
    prefix += costs[static_cast<size_t>(end) - 1];
    best = std::min(best, std::max(prefix, brute_force(costs, k - 1, end)));
  }
  return best;
}

}  // namespace

TEST(Partition, MinBottleneckMatchesExhaustiveSearch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(0.1, 5.0);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 4 + trial % 9;
    std::vector<double> costs(static_cast<size_t>(n));
    for (double& c : costs) c = dist(rng);
    for (int k = 1; k <= std::min(n, 5); ++k) {
      const auto ranges = partition_min_bottleneck(costs, k);
      ASSERT_EQ(isize(ranges), k);
      EXPECT_EQ(ranges.front().first, 0);
      EXPECT_EQ(ranges.back().end, n);
      for (const StageRange& r : ranges) EXPECT_LT(r.first, r.end);
      EXPECT_NEAR(bottleneck(costs, ranges), brute_force(costs, k), 1e-12);
    }
  }
}

TEST(Partition, MoreStagesThanLayersIsAnInputError) {
  EXPECT_THROW(partition_min_bottleneck({1, 2, 3}, 4), InputError);
}

// Dissertation §3.3.1 / Table 3.2: with a frozen encoder and LLM and a trainable
// projector, balancing the frozen-aware costs beats the "backward = 2 x forward" rule.
TEST(Partition, FrozenAwareViewBeatsNaiveOnTheFrozenVlm) {
  const auto aware = test::example("vlm-frozen.toml");
  const auto naive = test::example("vlm-frozen.toml", {"schedule.partition_view=naive"});
  const double t_aware = evaluate(aware->schedule, aware->config.cluster).iteration_time_s();
  const double t_naive = evaluate(naive->schedule, naive->config.cluster).iteration_time_s();
  EXPECT_LT(t_aware, t_naive);
  EXPECT_LT(evaluate_with_view(*aware, PartitionView::kTrue),
            evaluate_with_view(*aware, PartitionView::kNaive));
}

// The study's own view is its own plan evaluated, not a second plan; every other case
// plans again (here kernel noise, which a fresh plan does not have).
TEST(Partition, TheStudysOwnViewIsItsPlanAndTheOtherViewIsPlannedAgain) {
  for (const char* view : {"true", "naive"}) {
    const auto study =
        test::example("vlm-frozen.toml", {std::string("schedule.partition_view=") + view});
    const PartitionView own = study->config.schedule.partition_view;
    const PartitionView other =
        own == PartitionView::kTrue ? PartitionView::kNaive : PartitionView::kTrue;
    EXPECT_EQ(evaluate_with_view(*study, own),
              evaluate(study->schedule, study->config.cluster).iteration_time_s());
    const auto replanned =
        test::example("vlm-frozen.toml", {std::string("schedule.partition_view=") +
                                          (own == PartitionView::kTrue ? "naive" : "true")});
    EXPECT_EQ(evaluate_with_view(*study, other),
              evaluate(replanned->schedule, replanned->config.cluster).iteration_time_s());
  }
  // The own view is answered from the study's schedule, not a plan made again: an op made
  // slower in the study shows in the answer.
  auto study = test::example("vlm-frozen.toml");
  const double planned = evaluate(study->schedule, study->config.cluster).iteration_time_s();
  for (Op& op : study->schedule.programs[RankId{0}]) {
    if (auto* c = std::get_if<Compute>(&op)) c->seconds *= 10;
  }
  const double slowed = evaluate(study->schedule, study->config.cluster).iteration_time_s();
  ASSERT_GT(slowed, planned);
  EXPECT_EQ(evaluate_with_view(*study, study->config.schedule.partition_view), slowed);
  const auto noisy = test::example("vlm-frozen.toml", {"cost.jitter=0.1"});
  const auto quiet = test::example("vlm-frozen.toml");
  const double noisy_run = evaluate(noisy->schedule, noisy->config.cluster).iteration_time_s();
  const double quiet_run = evaluate(quiet->schedule, quiet->config.cluster).iteration_time_s();
  ASSERT_NE(noisy_run, quiet_run);
  EXPECT_EQ(evaluate_with_view(*noisy, PartitionView::kTrue), quiet_run);
}

// The other view is planned with the job's identical replicas folded, whatever sim.fold
// says (app/study.cpp, evaluate_replanned): the answer is the whole job's plan's.
TEST(Partition, TheOtherViewPlannedFoldedIsTheUnfoldedPlansTime) {
  const std::vector<std::string> four_replicas = {"parallel.dp=4", "cluster.nodes=4",
                                                  "sim.fold=false"};
  for (const char* view : {"true", "naive"}) {
    auto overrides = four_replicas;
    overrides.push_back(std::string("schedule.partition_view=") + view);
    const auto study = test::example("vlm-frozen.toml", overrides);
    ASSERT_EQ(study->fold.simulated, 4);
    const bool own_true = study->config.schedule.partition_view == PartitionView::kTrue;
    auto other_overrides = four_replicas;
    other_overrides.push_back(std::string("schedule.partition_view=") +
                              (own_true ? "naive" : "true"));
    const auto other = test::example("vlm-frozen.toml", other_overrides);
    EXPECT_EQ(evaluate_with_view(*study, own_true ? PartitionView::kNaive : PartitionView::kTrue),
              evaluate(other->schedule, other->config.cluster).iteration_time_s());
  }
}

TEST(Partition, FrozenVlmTimelineHasNoEncoderBackwardAndInputGradOnlyLlm) {
  const auto study = test::example("vlm-frozen.toml");
  const Schedule& s = study->schedule;
  double vision_f = 0, vision_b = 0, llm_b = 0, llm_bw = 0, proj_bw = 0;
  for (const auto& program : s.programs) {
    for (const Op& op : program) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c) continue;
      const std::string& module = s.module_names[c->module];
      if (module == "vision") (c->pass == Pass::kF ? vision_f : vision_b) += c->seconds;
      if (module == "llm" && c->pass == Pass::kB) {
        llm_b += c->seconds;
        llm_bw += c->weight_grad_s;
      }
      if (module == "projector" && c->pass == Pass::kB) proj_bw += c->weight_grad_s;
    }
  }
  EXPECT_GT(vision_f, 0);
  EXPECT_EQ(vision_b, 0);  // frozen, nothing trainable upstream
  EXPECT_GT(llm_b, 0);     // backpropagates input gradients to the projector...
  EXPECT_EQ(llm_bw, 0);    // ...but computes no weight gradients
  EXPECT_GT(proj_bw, 0);
}

}  // namespace loom
