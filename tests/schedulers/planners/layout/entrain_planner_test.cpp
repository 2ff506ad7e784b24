#include "schedulers/planners/layout/entrain_planner.hpp"

#include <gtest/gtest.h>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

struct Setup {
  Config config;
  std::unique_ptr<CostModel> cost;
  PlannerInputs in;
};

std::unique_ptr<Setup> paper(const std::string& name) {
  auto s = std::make_unique<Setup>();
  s->config = load_config(test::source_path("configs/paper/" + name), {});
  s->cost = make_cost_model(s->config);
  const Config& c = s->config;
  s->in.model = &c.model;
  s->in.cost = s->cost.get();
  s->in.cluster = &c.cluster;
  s->in.dp = c.parallel.dp;
  s->in.granularity = s->in.profile_tp = c.parallel.tp;
  s->in.global_batch = c.parallel.dp * c.schedule.microbatches * c.schedule.microbatch_size;
  s->in.microbatch_size = c.schedule.microbatch_size;
  s->in.tp_choices = {c.parallel.tp};
  return s;
}

}  // namespace

TEST(EntrainPlanner, ValidationTrialsFromBinomialBound) {
  EXPECT_EQ(validation_trials(0.05, 0.05), 59);  // §4.7.3: k = 59
  EXPECT_EQ(validation_trials(0.01, 0.05), 90);
  EXPECT_THROW(validation_trials(0, 0.05), InputError);
}

TEST(EntrainPlanner, ProportionalAllocationRoundsToUnits) {
  EXPECT_EQ(proportional_allocation(64, 4, 2, {0.5, 0.5}), (std::vector<int>{8, 8}));
  EXPECT_EQ(proportional_allocation(64, 4, 2, {0.56, 0.44}), (std::vector<int>{8, 8}));
  EXPECT_EQ(proportional_allocation(64, 4, 2, {0.57, 0.43}), (std::vector<int>{10, 6}));
  EXPECT_EQ(proportional_allocation(16, 1, 1, {0.99, 0.01}), (std::vector<int>{15, 1}));
  EXPECT_EQ(proportional_allocation(12, 1, 1, {1, 1, 1}), (std::vector<int>{4, 4, 4}));
  EXPECT_THROW(proportional_allocation(2, 1, 2, {0.5, 0.5}), InfeasibleError);
}

// Table 4.2's finding: small profiling batches give several allocations, 64 and larger
// a single one (SynthChartNet, Qwen2.5-Vision + Llama3-3b, 16 GPUs per replica).
TEST(EntrainPlanner, Table42SmallBatchesVaryLargeOnesAgree) {
  auto s = paper("entrain-synthchartnet-llama3-3b.toml");
  const auto comps = model_components(s->config.model);
  BatchSource draw = generator_stream(find_dataset("synthchartnet"), 1, 1 << 28);
  const int k = validation_trials(0.05, 0.05);
  const BernoulliTrial t1 = bernoulli_trial(s->in, comps, draw, 1, k);
  const BernoulliTrial t64 = bernoulli_trial(s->in, comps, draw, 64, k);
  const BernoulliTrial t256 = bernoulli_trial(s->in, comps, draw, 256, k);
  EXPECT_FALSE(t1.pass);
  EXPECT_GE(t1.allocations.size(), 3u);
  EXPECT_TRUE(t64.pass);
  EXPECT_TRUE(t256.pass);
  EXPECT_EQ(t256.allocations, (std::vector<std::vector<int>>{{8, 8}}));  // Table 4.1: 4 + 4 stages
  const MacroscopicProfile alg2 = find_min_profiling_batch(
      s->in, generator_stream(find_dataset("synthchartnet"), 1, 0), 0.05, 0.05, 1, 4096);
  // §4.4.2: "convergence occurs by batch size 256 across all evaluated datasets".
  EXPECT_GT(alg2.b_min, 4);
  EXPECT_LE(alg2.b_min, 256);
  EXPECT_FALSE(alg2.trials.front().pass);
}

// Eq 4.1/4.2: the chosen plan's iteration time is sum(tau) + (K - 1) beta_max, its stages
// cover each component once, and it beats every other candidate.
TEST(EntrainPlanner, ConfigurationSearchFollowsEq42) {
  auto s = paper("entrain-synthchartnet-llama3-1b.toml");
  s->in.tp_choices = {1, 2, 4};
  BatchSource draw = generator_stream(find_dataset("synthchartnet"), 1, 0);
  const ConfigSearch r = search_configuration(s->in, draw(256));
  const ParallelPlan& p = r.best();
  EXPECT_EQ(p.microbatches, 32);
  double sum = 0, beta = 0;
  const auto comps = model_components(s->config.model);
  for (size_t i = 0; i < p.components.size(); ++i) {
    const ComponentConfig& c = p.components[i];
    EXPECT_EQ(c.tp * c.pp, r.allocation[i]);
    EXPECT_EQ(c.stages.front().first, 0);
    EXPECT_EQ(c.stages.back().end, isize(comps[i].layers));
    for (double t : c.tau) sum += t;
    beta = std::max(beta, c.beta);
  }
  EXPECT_NEAR(p.iteration_s, sum + 31 * beta + p.reshard_s, 1e-9);
  for (const ParallelPlan& other : r.candidates) {
    if (other.fits_memory) {
      EXPECT_LE(other.throughput_samples_per_s, p.throughput_samples_per_s);
    }
    // Differing TP degrees pay for resharding; equal ones do not.
    const bool differ = other.components[0].tp != other.components[1].tp;
    EXPECT_EQ(other.reshard_s > 0, differ);
  }
  EXPECT_GT(r.candidates.size(), 1u);
}

// Table 4.1: one profiled sample (DistTrain-like) can land on another allocation than the
// macroscopic batch, and Entrain's plan is at least as fast on the dataset's workload.
TEST(EntrainPlanner, MacroscopicPlanBeatsMicroProfilesOnTheDataset) {
  auto s = paper("entrain-synthchartnet-llama3-3b.toml");
  BatchSource draw = generator_stream(find_dataset("synthchartnet"), 3, 0);
  const std::vector<Sample> macro = draw(256);
  const ConfigSearch entrain = search_configuration(s->in, macro);
  int differ = 0;
  for (int i = 0; i < 20; ++i) {
    const ConfigSearch one = search_configuration(s->in, draw(1));
    differ += one.allocation != entrain.allocation;
  }
  EXPECT_GT(differ, 0);
  const ConfigSearch dip = colocated_configuration(s->in, draw(4));
  EXPECT_TRUE(dip.best().colocated);
  EXPECT_EQ(dip.best().components[0].pp, 8);  // Table 4.1: DIP 8* stages
}

}  // namespace loom
