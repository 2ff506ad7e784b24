// Oobleck templates: node specification (§2.4.1.1) and the stage mapping of Eq 2.1-2.4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "core/errors.hpp"
#include "schedulers/oobleck_mapper.hpp"
#include "schedulers/oobleck_planner.hpp"

namespace loom::oobleck {
namespace {

PlanningProblem random_problem(std::mt19937& rng, int layers, int gpus, int nodes) {
  std::uniform_real_distribution<double> t(0.5, 3.0);
  PlanningProblem p;
  for (int l = 0; l < layers; ++l) {
    LayerCost c;
    c.forward_s = t(rng);
    c.backward_s = 2 * c.forward_s * t(rng) / 2;
    c.memory_bytes = 1e9 * t(rng);
    c.allreduce_in_node_s = 0.1 * t(rng);
    p.layers.push_back(c);
  }
  p.gpus_per_node = gpus;
  p.max_nodes = nodes;
  return p;
}

/// Every mapping of the layers onto `nodes` x M GPUs (stages inside one node, every GPU
/// used), scored with the same planning estimate: the exhaustive reference.
double brute_force(const PlanningProblem& p, int nodes) {
  StageMapper mapper(p);
  const int L = static_cast<int>(p.layers.size()), M = p.gpus_per_node;
  double best = std::numeric_limits<double>::infinity();
  std::vector<double> times;
  std::function<void(int, int, int)> rec = [&](int u, int node, int gpu) {
    if (node == nodes) {
      if (u == L) best = std::min(best, planned_time_s(times));
      return;
    }
    for (int v = u + 1; v <= L; ++v) {
      for (int m = 1; gpu + m <= M; ++m) {
        const StageCost c = mapper.stage_cost(u, v, m);
        if (!c.fits) continue;
        times.push_back(c.forward_s + c.backward_s);
        if (gpu + m == M)
          rec(v, node + 1, 0);
        else
          rec(v, node, gpu + m);
        times.pop_back();
      }
    }
  };
  rec(0, 0, 0);
  return best;
}

// Eq 2.1-2.3 are not separable: the divide and conquer keeps one best mapping per
// sub-problem, which is exact whenever one node holds one stage (M = 1) or the pipeline
// spans at most two nodes, and otherwise within a few percent of exhaustive search.
TEST(OobleckStageMapping, MatchesBruteForceOnSmallInstances) {
  std::mt19937 rng(7);
  int compared = 0, equal = 0;
  for (int trial = 0; trial < 800; ++trial) {
    const int L = 3 + trial % 8, M = 1 + trial % 4, n = 1 + (trial / 5) % 4;
    if (n > L) continue;
    PlanningProblem p = random_problem(rng, L, M, n);
    const PipelineTemplate t = map_stages(p, n);
    const double ref = brute_force(p, n);
    ASSERT_FALSE(t.stages.empty());
    ASSERT_GE(t.planned_time_s, ref * (1 - 1e-12)) << "better than exhaustive: impossible";
    if (M == 1 || n <= 2) {
      EXPECT_NEAR(t.planned_time_s, ref, 1e-9 * ref) << "L=" << L << " M=" << M << " n=" << n;
    } else {
      EXPECT_LE(t.planned_time_s, ref * 1.05) << "L=" << L << " M=" << M << " n=" << n;
    }
    ++compared;
    if (t.planned_time_s <= ref * (1 + 1e-9)) ++equal;
  }
  EXPECT_GT(compared, 550);
  EXPECT_GE(equal, compared * 98 / 100);
}

}  // namespace
}  // namespace loom::oobleck
