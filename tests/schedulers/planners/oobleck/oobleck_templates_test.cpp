// Oobleck templates: node specification (§2.4.1.1) and the stage mapping of Eq 2.1-2.4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_mapper.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

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
  const int L = isize(p.layers), M = p.gpus_per_node;
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

PlanningProblem uniform(int layers, int gpus, int nodes, double layer_gb, double gpu_gb) {
  PlanningProblem p;
  for (int l = 0; l < layers; ++l) {
    LayerCost c;
    c.forward_s = 1;
    c.backward_s = 2;
    c.memory_bytes = layer_gb * 1e9;
    p.layers.push_back(c);
  }
  p.gpus_per_node = gpus;
  p.max_nodes = nodes;
  p.gpu_memory_bytes = gpu_gb * 1e9;
  return p;
}

// Eq 2.4 and Fig 2.5: one stage runs N_b (F + B); S equal stages take (N_b + S - 1)(F + B),
// the 1F1B closed form, for any number of microbatches.
TEST(OobleckStageMapping, ClosedFormsOfOneF1B) {
  const PipelineTemplate one = map_stages(uniform(1, 1, 1, 1, 0), 1);
  ASSERT_EQ(one.num_stages(), 1);
  EXPECT_DOUBLE_EQ(one.iteration_time_s(7), 7 * 3.0);
  EXPECT_DOUBLE_EQ(one.planned_time_s, 4 * 3.0);  // N_b = 4S in planning
  const PipelineTemplate four = map_stages(uniform(8, 1, 4, 1, 0), 4);
  ASSERT_EQ(four.num_stages(), 4);
  for (int nb : {4, 9, 16}) EXPECT_DOUBLE_EQ(four.iteration_time_s(nb), (nb + 4 - 1) * 6.0);
}

// Every stage lives inside one node, every GPU is used once, layers are covered in order,
// and no stage exceeds GPU memory (§2.4.1.2).
TEST(OobleckStageMapping, StagesStayInOneNodeAndFitMemory) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int L = 6 + trial % 10, M = 1 + trial % 4, n = 1 + trial % 3;
    PlanningProblem p = random_problem(rng, L, M, n);
    p.gpu_memory_bytes = 6e9;
    const PipelineTemplate t = map_stages(p, n);
    if (t.stages.empty()) continue;
    PerPipelineNode<int> used(n, 0);
    int next_layer = 0;
    for (const TemplateStage& s : t.stages) {
      EXPECT_EQ(s.layer_begin, next_layer);
      EXPECT_LT(s.layer_begin, s.layer_end);
      next_layer = s.layer_end;
      ASSERT_GE(s.node, PipelineNode{0});
      ASSERT_LT(s.node, PipelineNode{n});
      EXPECT_EQ(s.first_gpu, used[s.node]);
      used[s.node] += s.gpus;
      EXPECT_LE(s.first_gpu + s.gpus, M) << "a stage crosses a node boundary";
      EXPECT_LE(s.memory_bytes, p.gpu_memory_bytes);
    }
    EXPECT_EQ(next_layer, L);
    for (int u : used) EXPECT_EQ(u, M) << "every GPU of every node is used";
  }
}

// §2.4.1.1: n_0 minimal by memory, templates of consecutive sizes n_0 .. N - f n_0.
TEST(OobleckTemplates, NodeSpecification) {
  PlanningProblem p = uniform(12, 2, 10, 1.0, 2.5);  // 12 GB on 5 GB nodes: n_0 = 3
  p.fault_tolerance = 1;
  EXPECT_EQ(minimal_nodes(p), 3);
  const PerTemplate<PipelineTemplate> ts = generate_templates(p);
  ASSERT_EQ(ts.size(), 5u);  // 3 .. 10 - 3 = 7
  for (const TemplateId i : ts.ids()) {
    EXPECT_EQ(ts[i].nodes, 3 + i.value());
    for (const TemplateStage& s : ts[i].stages) EXPECT_LE(s.memory_bytes, 2.5e9);
  }
  // More nodes per template: shorter per-microbatch stage work, never a slower estimate.
  EXPECT_LT(ts.back().slowest_s, ts.front().slowest_s);
}

TEST(OobleckTemplates, TooFewNodesIsInfeasibleWithTheDocumentedMessage) {
  PlanningProblem p = uniform(12, 1, 5, 1.0, 4.0);  // n_0 = 3, f = 1 needs 6 nodes
  p.fault_tolerance = 1;
  try {
    generate_templates(p);
    FAIL() << "expected InfeasibleError";
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than (f+1) n_0"), std::string::npos) << e.what();
  }
  PlanningProblem big = uniform(4, 2, 8, 10.0, 4.0);  // one layer needs 5 GB per GPU
  EXPECT_THROW(generate_templates(big), InfeasibleError);
}

TEST(OobleckTemplates, Deterministic) {
  std::mt19937 rng(11);
  PlanningProblem p = random_problem(rng, 20, 4, 6);
  const auto a = generate_templates(p), b = generate_templates(p);
  ASSERT_EQ(a.size(), b.size());
  for (const TemplateId i : a.ids()) {
    ASSERT_EQ(a[i].stages.size(), b[i].stages.size());
    EXPECT_EQ(a[i].planned_time_s, b[i].planned_time_s);
    for (size_t k = 0; k < a[i].stages.size(); ++k) {
      EXPECT_EQ(a[i].stages[k].layer_end, b[i].stages[k].layer_end);
      EXPECT_EQ(a[i].stages[k].gpus, b[i].stages[k].gpus);
    }
  }
}

}  // namespace
}  // namespace loom::oobleck
