// Pipeline templates (dissertation §2.4.1): node specification (§2.4.1.1, App. A.1) and the
// divide-and-conquer GPU-stage mapping with memoisation (§2.4.1.2, Eq 2.1-2.4).
//
// Division is canonical so that every stage stays inside one node: across nodes the first
// node (with its stages) is split off the rest; inside a node the first stage (with its
// GPUs) is split off the rest. Every mapping the paper's (s, k, m) divisions reach is reached
// this way, with far fewer memo states.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_mapper.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {

double PipelineTemplate::iteration_time_s(int microbatches) const {
  // Eq 2.2 with the actual N_b; k* is 0-based (one stage gives T = N_b t, Eq 2.4). With
  // fewer microbatches than stages after k* the formula undershoots: one microbatch alone
  // already takes T1 (a forward and a backward through every stage).
  const double t2 = (microbatches - num_stages() + slowest_stage - 1) * slowest_s;
  return std::max(t1_s, t1_s + t2 + t3_s);
}

const TemplateStage& PipelineTemplate::stage_of_layer(int layer) const {
  for (const TemplateStage& s : stages) {
    if (layer >= s.layer_begin && layer < s.layer_end) return s;
  }
  throw std::out_of_range("oobleck: layer " + std::to_string(layer) + " not in the template");
}

int minimal_nodes(const PlanningProblem& problem) {
  if (problem.gpu_memory_bytes <= 0) return 1;
  double total = 0;
  for (const LayerCost& l : problem.layers) total += l.memory_bytes;
  const double per_node = problem.gpu_memory_bytes * problem.gpus_per_node;
  return std::max(1, static_cast<int>(std::ceil(total / per_node - 1e-12)));
}

std::string too_few_nodes_message(int nodes, int fault_tolerance, int n0) {
  return "N' = " + std::to_string(nodes) + " nodes are fewer than (f+1) n_0 = (" +
         std::to_string(fault_tolerance) + "+1) x " + std::to_string(n0) + " = " +
         std::to_string((fault_tolerance + 1) * n0) +
         ": Oobleck cannot keep f+1 pipeline replicas (dissertation §2.3.4); stop and restart "
         "from a checkpoint when enough nodes return";
}

namespace {

void check_problem(const PlanningProblem& p) {
  if (p.layers.empty()) throw InputError("oobleck: the profile has no layers");
  if (p.gpus_per_node < 1) throw InputError("oobleck: gpus_per_node must be at least 1");
  if (p.max_nodes < 1) throw InputError("oobleck: the node count N must be at least 1");
  if (p.fault_tolerance < 0) throw InputError("oobleck: f must be non-negative");
  if (p.microbatch_size < 1) throw InputError("oobleck: microbatch size must be at least 1");
}

}  // namespace

PipelineTemplate map_stages(const PlanningProblem& problem, int nodes) {
  check_problem(problem);
  StageMapper mapper(problem);
  return mapper.best(nodes);
}

PerTemplate<PipelineTemplate> generate_templates(const PlanningProblem& problem) {
  check_problem(problem);
  const int N = problem.max_nodes;
  const int f = problem.fault_tolerance;
  const int L = isize(problem.layers);
  const int M = problem.gpus_per_node;
  for (int l = 0; const LayerCost& layer : problem.layers) {
    const double need = layer.memory_bytes / M;
    if (problem.gpu_memory_bytes > 0 && need > problem.gpu_memory_bytes) {
      throw InfeasibleError("oobleck: layer " + std::to_string(l) + " needs " +
                            std::to_string(need / 1e9) +
                            " GB per GPU even sharded over a whole "
                            "node's " +
                            std::to_string(M) + " GPUs, more than the GPU memory");
    }
    ++l;
  }
  StageMapper mapper(problem);  // one memo for all templates (§2.4.1.2 "memoization")
  // n_0: minimal by memory; a layer too large for any stage makes the next sizes fail too,
  // so search upwards only while (f+1) n_0 <= N.
  int n0 = minimal_nodes(problem);
  PipelineTemplate first;
  for (;; ++n0) {
    if ((f + 1) * n0 > N) {
      throw InfeasibleError("oobleck: " + too_few_nodes_message(N, f, n0) + " (n_0 = " +
                            std::to_string(n0) + " is the fewest nodes whose GPUs hold the model)");
    }
    first = mapper.best(n0);
    if (!first.stages.empty()) break;
  }
  // §2.4.1.1: the largest template is N - f n_0 (f replicas of n_0 plus one with the rest);
  // consecutive sizes n_0 .. N - f n_0 cover every N' >= (f+1) n_0 (App. A.1). A stage
  // lives in one node, so a template has at most L nodes: sizes are capped at L.
  PerTemplate<PipelineTemplate> out{first};
  for (int n = n0 + 1; n <= std::min(N - f * n0, L); ++n) {
    PipelineTemplate t = mapper.best(n);
    if (t.stages.empty()) {
      throw InfeasibleError("oobleck: no stage mapping of " + std::to_string(n) +
                            " nodes fits GPU memory although " + std::to_string(n0) + " did");
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace loom::oobleck
