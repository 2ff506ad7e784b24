// Oobleck instantiation (Eq 2.5, App. A.1), batch distribution (Eq 2.6) and layer-granular
// gradient synchronisation (§2.6.1).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {
namespace {

/// `layers` equal layers of 1 GB each; GPU memory chosen so that n_0 = `n0` (M = 1).
PlanningProblem with_n0(int layers, int n0, int nodes, int f) {
  PlanningProblem p;
  for (int l = 0; l < layers; ++l) {
    LayerCost c;
    c.forward_s = 0.01 * (1 + l % 3);
    c.backward_s = 2 * c.forward_s;
    c.memory_bytes = 1e9;
    c.state_bytes = 0.5e9;
    c.allreduce_across_nodes_s = 0.001;
    p.layers.push_back(c);
  }
  p.gpu_memory_bytes = 1e9 * std::ceil(static_cast<double>(layers) / n0);
  p.max_nodes = nodes;
  p.fault_tolerance = f;
  p.microbatch_size = 2;
  p.global_batch = 256;
  return p;
}

std::vector<int> ids(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 100);  // node ids need not start at 0
  return v;
}

// App. A.1: with templates n_0 .. N - f n_0, every N' in [(f+1) n_0, N] is used entirely by
// >= f+1 pipelines, and the batch always sums to B.
TEST(OobleckInstantiate, EveryFeasibleNodeCountUsesAllNodes) {
  int cases = 0;
  for (int n0 : {1, 2, 3}) {
    for (int f : {0, 1, 2, 3}) {
      for (int N = (f + 1) * n0; N <= 13; ++N) {
        const PlanningProblem p = with_n0(12, n0, N, f);
        const PerTemplate<PipelineTemplate> ts = generate_templates(p);
        ASSERT_EQ(ts.front().nodes, n0);
        for (int n = (f + 1) * n0; n <= N; ++n) {
          const Instantiation inst = instantiate(p, ts, ids(n));
          std::set<int> used;
          int microbatches = 0;
          for (const Pipeline& pl : inst.pipelines) {
            EXPECT_EQ(isize(pl.nodes), ts[pl.template_index].nodes);
            used.insert(pl.nodes.begin(), pl.nodes.end());
            EXPECT_GE(pl.microbatches, 1);
            microbatches += pl.microbatches;
          }
          EXPECT_EQ(isize(used), n) << "N=" << N << " f=" << f << " n'=" << n;
          EXPECT_EQ(inst.num_nodes(), n);
          EXPECT_GE(isize(inst.pipelines), f + 1);
          EXPECT_EQ(microbatches * p.microbatch_size, p.global_batch);
          EXPECT_GT(inst.throughput_samples_per_s(), 0);
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 150);
}

TEST(OobleckInstantiate, BelowFPlusOneN0IsInfeasible) {
  const PlanningProblem p = with_n0(12, 2, 8, 1);
  const auto ts = generate_templates(p);
  try {
    instantiate(p, ts, ids(3));
    FAIL() << "expected InfeasibleError";
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("N' = 3 nodes are fewer than (f+1) n_0 = (1+1) x 2 = 4"),
              std::string::npos)
        << e.what();
  }
}

// Fig 2.7: templates of 2, 3 and 4 nodes on 7 nodes: X = (2,1,0) and (0,1,1).
TEST(OobleckInstantiate, CoinChangeMatchesFigure27) {
  PerTemplate<PipelineTemplate> ts(3);
  ts[TemplateId{0}].nodes = 2;
  ts[TemplateId{1}].nodes = 3;
  ts[TemplateId{2}].nodes = 4;
  auto xs = feasible_counts(ts, 7, 0);
  std::ranges::sort(xs, std::ranges::lexicographical_compare);
  ASSERT_EQ(xs.size(), 2u);
  EXPECT_EQ(xs[0], (PerTemplate<int>{0, 1, 1}));
  EXPECT_EQ(xs[1], (PerTemplate<int>{2, 1, 0}));
  EXPECT_EQ(feasible_counts(ts, 7, 2).size(), 1u);  // only 2+2+3 has 3 pipelines
}

PipelineTemplate linear(double t1, int stages, double tstar) {
  PipelineTemplate t;
  t.stages.resize(static_cast<size_t>(stages));
  t.slowest_stage = stages - 1;  // so T(N) = T1 + (N - 2) t* + T3 with T3 = t*
  t.slowest_s = tstar;
  t.t1_s = t1;
  t.t3_s = tstar;
  return t;
}

// Eq 2.6: sums to B / b; a pipeline twice as fast per microbatch gets about twice as many;
// the result equals exhaustive search on small instances.
TEST(OobleckBatch, DistributionBalancesAndSums) {
  const PipelineTemplate fast = linear(1, 2, 1), slow = linear(2, 2, 2);
  const BatchDistribution d = distribute_batch({&fast, &slow, &slow}, 64, 2);
  ASSERT_TRUE(d.distributable);
  EXPECT_EQ(d.microbatches[0] + d.microbatches[1] + d.microbatches[2], 32);
  EXPECT_NEAR(d.microbatches[0], 2 * d.microbatches[1], 1);
  // Large instance (heuristic path) vs its own pairwise optimum on a permuted order.
  std::vector<const PipelineTemplate*> many;
  for (int i = 0; i < 12; ++i) many.push_back(i % 3 ? &slow : &fast);
  const BatchDistribution big = distribute_batch(many, 2048, 8);
  ASSERT_TRUE(big.distributable);
  EXPECT_EQ(std::accumulate(big.microbatches.begin(), big.microbatches.end(), 0), 256);
  double lo = 1e300, hi = 0;
  for (size_t i = 0; i < many.size(); ++i) {
    const double t = many[i]->iteration_time_s(big.microbatches[i]);
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  EXPECT_LE(hi - lo, 2.0 + 1e-9) << "balanced to within one slow microbatch";
}

double variance(const std::vector<double>& t) {
  double m = 0, v = 0;
  for (double x : t) m += x / static_cast<double>(t.size());
  for (double x : t) v += (x - m) * (x - m) / static_cast<double>(t.size());
  return v;
}

// Exhaustive on small instances (3 pipelines, 40 microbatches: 741 compositions) and the
// rounding + exchange path on a larger one (4 pipelines, 60: 32,509 compositions) both
// reach the exhaustive optimum of Eq 2.6.
TEST(OobleckBatch, EqualsExhaustiveSearch) {
  const PipelineTemplate a = linear(1, 3, 0.7), b = linear(3, 4, 1.3), c = linear(2, 2, 1.0),
                         e = linear(0.5, 2, 0.45);
  const BatchDistribution d3 = distribute_batch({&a, &b, &c}, 40, 1);
  double best3 = 1e300;
  for (int x = 1; x < 40; ++x)
    for (int y = 1; x + y < 40; ++y)
      best3 = std::min(best3, variance({a.iteration_time_s(x), b.iteration_time_s(y),
                                        c.iteration_time_s(40 - x - y)}));
  EXPECT_NEAR(d3.variance, best3, 1e-12);
  const BatchDistribution d4 = distribute_batch({&a, &b, &c, &e}, 120, 2);
  double best4 = 1e300;
  for (int x = 1; x < 60; ++x)
    for (int y = 1; x + y < 60; ++y)
      for (int z = 1; x + y + z < 60; ++z)
        best4 =
            std::min(best4, variance({a.iteration_time_s(x), b.iteration_time_s(y),
                                      c.iteration_time_s(z), e.iteration_time_s(60 - x - y - z)}));
  EXPECT_NEAR(d4.variance, best4, 1e-9);
}

TEST(OobleckBatch, RecommendsADistributableGlobalBatch) {
  const PipelineTemplate t = linear(1, 1, 1);
  const BatchDistribution odd = distribute_batch({&t, &t}, 10, 4);  // 8 or 12: tie -> 12
  EXPECT_FALSE(odd.distributable);
  EXPECT_EQ(odd.recommended_global_batch, 12);
  const BatchDistribution small = distribute_batch({&t, &t, &t}, 4, 2);  // 2 < 3 pipelines
  EXPECT_FALSE(small.distributable);
  EXPECT_EQ(small.recommended_global_batch, 6);
}

// §2.6.1, Fig 2.9: a 2-stage and a 3-stage pipeline of a 6-layer model synchronise each
// layer between the nodes holding it; the busiest node's NIC sets the time.
TEST(OobleckSync, LayerGranularGroupsAcrossHeterogeneousPipelines) {
  PlanningProblem p = with_n0(6, 1, 5, 0);
  for (LayerCost& c : p.layers) c.allreduce_across_nodes_s = 0.5;
  p.gpu_memory_bytes = 0;
  PerTemplate<PipelineTemplate> ts{map_stages(p, 2), map_stages(p, 3)};
  ts[TemplateId{0}].nodes = 2;
  Instantiation inst;
  inst.pipelines = {{TemplateId{0}, {10, 11}, 4}, {TemplateId{1}, {20, 21, 22}, 4}};
  const auto groups = gradient_sync_groups(p, ts, inst);
  ASSERT_EQ(groups.size(), 6u);
  for (const LayerSyncGroup& g : groups) {
    ASSERT_EQ(g.nodes.size(), 2u);
    EXPECT_EQ(g.nodes[0], 10 + ts[TemplateId{0}].stage_of_layer(g.layer).node.value());
    EXPECT_EQ(g.nodes[1], 20 + ts[TemplateId{1}].stage_of_layer(g.layer).node.value());
    EXPECT_DOUBLE_EQ(g.time_s, 0.5);  // ring of 2: 2(r-1)/r = 1 times the profile's time
  }
  int most = 0;  // layers on the busiest node of either pipeline
  for (const auto& t : ts)
    for (const auto& s : t.stages) most = std::max(most, s.layer_end - s.layer_begin);
  EXPECT_DOUBLE_EQ(gradient_sync_time_s(p, ts, inst), 0.5 * most);
}

}  // namespace
}  // namespace loom::oobleck
