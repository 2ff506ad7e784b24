// Oobleck planning latency over the grid of dissertation Table 2.3: 8/16/24 nodes x 1/4/8
// GPUs per node x 24/32/64/96 layers. Like the paper, each cell creates one pipeline template
// spanning all the nodes (§2.7.4.1); a second table times every template n_0 = 1 .. N
// (f = 0) with the shared memo. Prints Markdown tables with the paper's figures beside ours.
#include <chrono>
#include <cstdio>
#include <vector>

#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace {

using loom::oobleck::LayerCost;
using loom::oobleck::PlanningProblem;

// Dissertation Table 2.3 (seconds, the authors' Python planner), [nodes][gpus][layers].
constexpr double kPaper[3][3][4] = {
    {{0.28, 0.71, 9.65, 68.50}, {0.41, 1.15, 11.58, 74.56}, {0.54, 1.50, 20.98, 109.76}},
    {{3.37, 7.45, 66.35, 540.36}, {4.56, 10.41, 108.10, 649.67}, {4.90, 11.78, 176.04, 1213.63}},
    {{11.35, 30.11, 262.47, 1477.54},
     {14.78, 45.80, 472.53, 2153.84},
     {15.59, 49.25, 520.08, 3297.92}}};
constexpr int kNodes[3] = {8, 16, 24};
constexpr int kGpus[3] = {1, 4, 8};
constexpr int kLayers[4] = {24, 32, 64, 96};

/// A GPT-like stack: embedding-heavy first layer, identical blocks, a heavier head, so the
/// mapping is not trivially uniform.
PlanningProblem problem(int nodes, int gpus, int layers) {
  PlanningProblem p;
  for (int l = 0; l < layers; ++l) {
    LayerCost c;
    const double scale = (l == 0 || l == layers - 1) ? 1.6 : 1.0 + 0.01 * (l % 7);
    c.forward_s = 0.010 * scale;
    c.backward_s = 0.020 * scale;
    c.memory_bytes = 1.5e9 * scale;
    c.allreduce_in_node_s = 0.002;
    c.allreduce_across_nodes_s = 0.02;
    p.layers.push_back(c);
  }
  p.gpus_per_node = gpus;
  p.gpu_memory_bytes = 40e9;  // A40-class (§2.7.1)
  p.max_nodes = nodes;
  p.global_batch = 1024;
  return p;
}

template <typename F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void table(bool all_templates) {
  std::printf("\n%s\n\n| nodes | GPUs/node | 24 layers | 32 layers | 64 layers | 96 layers |\n",
              all_templates ? "All templates n_0..N (f = 0, one shared memo): Loom seconds"
                            : "One template of N nodes: Loom seconds (paper's Python seconds)");
  std::printf("|---|---|---|---|---|---|\n");
  double worst = 0;
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      std::printf("| %d | %d |", kNodes[a], kGpus[b]);
      for (int c = 0; c < 4; ++c) {
        const PlanningProblem p = problem(kNodes[a], kGpus[b], kLayers[c]);
        const double s = seconds([&] {
          if (all_templates) {
            (void)loom::oobleck::generate_templates(p);
          } else {
            (void)loom::oobleck::map_stages(p, kNodes[a]);
          }
        });
        worst = std::max(worst, s);
        if (all_templates) {
          std::printf(" %.3f |", s);
        } else {
          std::printf(" %.3f (%.2f) |", s, kPaper[a][b][c]);
        }
        std::fflush(stdout);
      }
      std::printf("\n");
    }
  }
  std::printf("\nslowest cell: %.3f s\n", worst);
}

/// Eq 2.5 + Eq 2.6 over every X (instantiate, exact branch and bound) on N' nodes with
/// n_0 = 1 and f = 1, beside the exhaustive reference where its list fits (N' <= 40).
void instantiation_table() {
  std::printf(
      "\nInstantiation (Eq 2.5 + 2.6), n_0 = 1, f = 1, 32 layers, 1 GPU/node, B = 1024, "
      "b = 4: seconds\n\n| N' | instantiate | exhaustive |\n|---|---|---|\n");
  for (int n : {20, 30, 40, 55}) {
    PlanningProblem p = problem(n, 1, 32);
    p.gpu_memory_bytes = 0;  // n_0 = 1
    p.fault_tolerance = 1;
    p.microbatch_size = 4;
    const auto ts = loom::oobleck::generate_templates(p);
    std::vector<int> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
    const double fast = seconds([&] { (void)loom::oobleck::instantiate(p, ts, ids); });
    if (n <= 40) {
      const double slow = seconds([&] { (void)loom::oobleck::instantiate_exhaustive(p, ts, ids); });
      std::printf("| %d | %.3f | %.3f |\n", n, fast, slow);
    } else {
      std::printf("| %d | %.3f | (over 2,000,000 lists) |\n", n, fast);
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main() {
  table(false);
  table(true);
  instantiation_table();
  return 0;
}
