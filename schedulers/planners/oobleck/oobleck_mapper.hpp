#pragma once
/// Internal to the Oobleck planner: the memoised divide-and-conquer GPU-stage mapping of
/// dissertation Eq 2.1-2.4, shared by all templates of one problem.
#include <vector>

#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {

/// The planning estimate of a 1F1B pipeline whose stages take `stage_times` (F + B each):
/// T1 + T2 + T3 with N_b = 4S (Eq 2.2), k* the slowest stage (the last one on ties).
double planned_time_s(const std::vector<double>& stage_times);

/// F + B of layers [u, v) on d GPUs of one node, and its per-GPU memory (§2.6: the stage's
/// layers are sharded over its d GPUs; each microbatch all-gathers parameters in the
/// forward and reduce-scatters gradients in the backward, half an all-reduce each).
struct StageCost {
  double forward_s = 0;
  double backward_s = 0;
  double memory_bytes = 0;
  bool fits = true;
};

class StageMapper {
 public:
  explicit StageMapper(const PlanningProblem& problem);
  /// The best template over S in [nodes, min(L, nodes M)]; empty stages if none fits.
  PipelineTemplate best(int nodes);
  StageCost stage_cost(int u, int v, int d) const;

 private:
  /// A solved sub-problem: T1, T3, the slowest stage (local index) and the total of Eq 2.1-2.3
  /// with N_b = 4S', plus the division that produced it.
  struct Sub {
    double t1 = 0, t3 = 0, tstar = 0, total = -1;  // total < 0: not computed yet
    int kstar = 0;
    int split_layer = -1;  // first part is layers [u, split_layer)
    int split_units = 0;   // GPUs (inside a node) or stages (across nodes) of the first part
  };
  static Sub combine(const Sub& a, int sa, const Sub& b, int sb);
  /// `best` becomes a + b, split at (split_layer, split_units), where b fits and the sum
  /// is faster.
  static void keep_faster(Sub& best, const Sub& a, int sa, const Sub& b, int sb, int split_layer,
                          int split_units);
  Sub single(int u, int v, int d) const;
  const Sub& in_node(int s, int u, int v, int g);
  const Sub& across(int S, int u, int n);
  void emit_in_node(int s, int u, int v, int g, PipelineNode node, int first_gpu,
                    std::vector<TemplateStage>& out);
  void emit_across(int S, int u, int n, PipelineNode node, std::vector<TemplateStage>& out);

  const PlanningProblem& p_;
  int L_ = 0, M_ = 1, N_ = 1;
  std::vector<double> pf_, pb_, pm_, par_;  // prefix sums of F, B, memory, in-node all-reduce
  std::vector<Sub> in_node_memo_, across_memo_;
};

}  // namespace loom::oobleck
