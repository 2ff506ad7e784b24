// Eq 2.5's branch and bound (oobleck_instantiate_search.cpp) against the exhaustive
// reference: the same X, batch split and time on every small instance, ties included, and
// 55 nodes with n_0 = 1 (beyond what the exhaustive list can store) use every node.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {
namespace {

/// Random layers (uneven F, B, memory and sync costs) with GPU memory giving n_0 = `n0`.
PlanningProblem random_problem(std::mt19937& rng, int layers, int n0, int nodes, int f, int gpus) {
  std::uniform_real_distribution<double> u(0.5, 1.5);
  PlanningProblem p;
  double total = 0;
  for (int l = 0; l < layers; ++l) {
    LayerCost c;
    c.forward_s = 0.01 * u(rng);
    c.backward_s = 2 * c.forward_s * u(rng);
    c.memory_bytes = 1e9;
    c.state_bytes = 0.5e9;
    c.allreduce_in_node_s = 0.0002 * u(rng);
    c.allreduce_across_nodes_s = 0.004 * u(rng) * u(rng);
    total += c.memory_bytes;
    p.layers.push_back(c);
  }
  p.gpus_per_node = gpus;
  p.gpu_memory_bytes = std::ceil(total / (n0 * gpus) / 1e9) * 1e9;
  p.max_nodes = nodes;
  p.fault_tolerance = f;
  p.microbatch_size = 1 + static_cast<int>(rng() % 2);
  p.global_batch = p.microbatch_size * (8 + static_cast<int>(rng() % 60));
  return p;
}

std::vector<int> ids(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

void expect_same(const Instantiation& a, const Instantiation& b, const std::string& what) {
  EXPECT_EQ(a.counts, b.counts) << what;
  EXPECT_EQ(a.iteration_time_s, b.iteration_time_s) << what;
  ASSERT_EQ(a.pipelines.size(), b.pipelines.size()) << what;
  for (size_t i = 0; i < a.pipelines.size(); ++i) {
    EXPECT_EQ(a.pipelines[i].template_index, b.pipelines[i].template_index) << what;
    EXPECT_EQ(a.pipelines[i].nodes, b.pipelines[i].nodes) << what;
    EXPECT_EQ(a.pipelines[i].microbatches, b.pipelines[i].microbatches) << what;
  }
}

TEST(OobleckInstantiateSearch, EqualsExhaustiveSearchOnSmallInstances) {
  std::mt19937 rng(7);
  int cases = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n0 = 1 + trial % 3, f = trial % 3, gpus = 1 + trial % 2;
    const int nodes = std::min(14, (f + 1) * n0 + 2 + static_cast<int>(rng() % 8));
    const PlanningProblem p = random_problem(rng, 14, n0, nodes, f, gpus);
    const PerTemplate<PipelineTemplate> ts = generate_templates(p);
    for (int n = (f + 1) * ts.front().nodes; n <= nodes; ++n) {
      const std::string what = "trial " + std::to_string(trial) + " N'=" + std::to_string(n);
      expect_same(instantiate(p, ts, ids(n)), instantiate_exhaustive(p, ts, ids(n)), what);
      ++cases;
    }
  }
  EXPECT_GT(cases, 200);
}

// Identical templates make many X tie exactly: both searches must pick the same one.
TEST(OobleckInstantiateSearch, TiesGoToTheExhaustiveSearchsFirstX) {
  PlanningProblem p;
  for (int l = 0; l < 8; ++l) p.layers.push_back({0.01, 0.02, 1e9, 1e9, 0, 0});
  p.max_nodes = 9;
  p.global_batch = 36;
  const PerTemplate<PipelineTemplate> ts = generate_templates(p);
  for (int n = 1; n <= 9; ++n)
    expect_same(instantiate(p, ts, ids(n)), instantiate_exhaustive(p, ts, ids(n)),
                "N'=" + std::to_string(n));
}

// The GCP a100 trace's scale: 55 nodes, n_0 = 1 (451,275 X; the exhaustive list of every
// N' <= 55 exceeds its 2,000,000 cap). Every node is used by >= f+1 pipelines.
TEST(OobleckInstantiateSearch, FiftyFiveNodesWithN0OfOne) {
  std::mt19937 rng(3);
  PlanningProblem p = random_problem(rng, 64, 1, 55, 1, 1);
  p.global_batch = 1024;
  p.microbatch_size = 4;
  const PerTemplate<PipelineTemplate> ts = generate_templates(p);
  ASSERT_EQ(ts.front().nodes, 1);
  EXPECT_THROW(feasible_counts(ts, 55, 1), InputError);
  for (int n : {2, 17, 40, 55}) {
    const Instantiation inst = instantiate(p, ts, ids(n));
    std::set<int> used;
    int mb = 0;
    for (const Pipeline& pl : inst.pipelines) {
      used.insert(pl.nodes.begin(), pl.nodes.end());
      mb += pl.microbatches;
    }
    EXPECT_EQ(isize(used), n);
    EXPECT_GE(inst.pipelines.size(), 2u);
    EXPECT_EQ(mb * p.microbatch_size, p.global_batch);
  }
}

}  // namespace
}  // namespace loom::oobleck
