// Pipeline instantiation (dissertation §2.4.2.1, Eq 2.5) and the layer-granular gradient
// synchronisation between heterogeneous pipelines (§2.6.1, Fig 2.9).
#include <algorithm>
#include <map>
#include <span>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {

int Instantiation::num_nodes() const {
  int n = 0;
  for (const Pipeline& p : pipelines) n += isize(p.nodes);
  return n;
}

std::vector<PerTemplate<int>> feasible_counts(const PerTemplate<PipelineTemplate>& templates,
                                              int nodes, int fault_tolerance) {
  // Eq 2.5: X(p', N') = X(p'-1, N') ++ theta(X(p', N' - n_p'), p'), filled for p' over the
  // templates and N' = 0 .. nodes; X(., 0) = { 0 }. Row p' only needs row p'-1, so one row
  // is kept and updated in place with N' ascending (X(p', N' - n_p') is already row p').
  constexpr size_t kMaxLists = 2'000'000;  // beyond this, enumeration is not the tool
  IdVector<NodeCount, std::vector<PerTemplate<int>>> row(std::max(nodes, 0) + 1);
  row[NodeCount{0}].push_back(PerTemplate<int>(templates.ssize(), 0));
  size_t stored = 1;
  for (const TemplateId j : templates.ids()) {
    const int nj = templates[j].nodes;
    for (int n = nj; n <= nodes; ++n) {
      for (PerTemplate<int> x : row[NodeCount{n - nj}]) {
        ++x[j];  // theta
        row[NodeCount{n}].push_back(std::move(x));
        if (++stored > kMaxLists) {
          throw InputError("oobleck: more than 2,000,000 template combinations for " +
                           std::to_string(nodes) + " nodes; use fewer nodes or larger n_0");
        }
      }
    }
  }
  std::vector<PerTemplate<int>> out;
  for (PerTemplate<int>& x : row.back()) {  // X(p, nodes)
    int pipelines = 0;
    for (int c : x) pipelines += c;
    if (pipelines >= fault_tolerance + 1) out.push_back(std::move(x));  // Requirement 2
  }
  return out;
}

namespace {

/// Pipelines of X, larger templates first, without nodes.
Instantiation skeleton(const PerTemplate<int>& counts) {
  Instantiation inst;
  inst.counts = counts;
  for (int j = counts.ssize() - 1; j >= 0; --j) {
    const TemplateId t{j};
    for (int c = 0; c < counts[t]; ++c) inst.pipelines.push_back({t, {}, 0});
  }
  return inst;
}

void assign_nodes(const PerTemplate<PipelineTemplate>& templates, const std::vector<int>& nodes,
                  Instantiation& inst) {
  size_t next = 0;
  for (Pipeline& p : inst.pipelines) {
    for (int k = 0; k < templates[p.template_index].nodes; ++k) p.nodes.push_back(nodes[next++]);
  }
}

void check_enough_nodes(const PerTemplate<PipelineTemplate>& templates, int n_avail, int f) {
  if (n_avail > kMaxInstantiationNodes) {
    throw InfeasibleError("oobleck: " + std::to_string(n_avail) +
                          " nodes are more than the planner instantiates (at most " +
                          std::to_string(kMaxInstantiationNodes) + " nodes)");
  }
  const int n0 = templates.empty() ? 1 : templates.front().nodes;
  if (n_avail < (f + 1) * n0)
    throw InfeasibleError("oobleck: " + too_few_nodes_message(n_avail, f, n0));
}

}  // namespace

Instantiation instantiate(const PlanningProblem& problem,
                          const PerTemplate<PipelineTemplate>& templates,
                          const std::vector<int>& nodes) {
  check_enough_nodes(templates, isize(nodes), problem.fault_tolerance);
  Instantiation best = best_instantiation(problem, templates, isize(nodes));
  assign_nodes(templates, nodes, best);
  return best;
}

Instantiation instantiate_exhaustive(const PlanningProblem& problem,
                                     const PerTemplate<PipelineTemplate>& templates,
                                     const std::vector<int>& nodes) {
  const int n_avail = isize(nodes);
  const int f = problem.fault_tolerance;
  check_enough_nodes(templates, n_avail, f);
  const std::vector<PerTemplate<int>> all = feasible_counts(templates, n_avail, f);
  if (all.empty()) {
    throw InfeasibleError("oobleck: no combination of the templates (" +
                          std::to_string(templates.front().nodes) + ".." +
                          std::to_string(templates.back().nodes) + " nodes) uses exactly " +
                          std::to_string(n_avail) + " nodes with >= f+1 pipelines");
  }
  // §2.4.2.2: the X with the highest throughput after batch distribution.
  Instantiation best;
  bool found = false;
  for (const PerTemplate<int>& counts : all) {
    Instantiation inst = skeleton(counts);
    std::vector<const PipelineTemplate*> pipes;
    for (const Pipeline& p : inst.pipelines) pipes.push_back(&templates[p.template_index]);
    const BatchDistribution d =
        distribute_batch(pipes, problem.global_batch, problem.microbatch_size);
    if (!d.distributable) continue;
    for (size_t i = 0; i < pipes.size(); ++i) inst.pipelines[i].microbatches = d.microbatches[i];
    inst.global_batch = problem.global_batch;
    evaluate(problem, templates, inst);
    if (!found || inst.iteration_time_s < best.iteration_time_s) {
      best = std::move(inst);
      found = true;
    }
  }
  if (!found) {
    // Report the recommendation for the fewest pipelines (the easiest to satisfy).
    Instantiation inst = skeleton(all.front());
    distribute_batch(problem, templates, inst);  // throws InputError with the recommendation
  }
  assign_nodes(templates, nodes, best);
  return best;
}

std::vector<LayerSyncGroup> gradient_sync_groups(const PlanningProblem& problem,
                                                 const PerTemplate<PipelineTemplate>& templates,
                                                 const Instantiation& inst) {
  std::vector<LayerSyncGroup> groups;
  const int r = isize(inst.pipelines);
  for (int l = 0; const LayerCost& layer : problem.layers) {
    LayerSyncGroup g;
    g.layer = l;
    for (const Pipeline& p : inst.pipelines) {
      const TemplateStage& s = templates[p.template_index].stage_of_layer(l);
      // A pipeline without node ids (during planning) is numbered by its stage's node.
      g.nodes.push_back(p.nodes.empty() ? s.node.value() : p.nodes[s.node]);
    }
    // Ring of r members: 2(r-1)/r times the two-member time of the profile.
    g.time_s = r > 1 ? layer.allreduce_across_nodes_s * 2.0 * (r - 1) / r : 0;
    groups.push_back(std::move(g));
    ++l;
  }
  return groups;
}

double gradient_sync_time_s(const PlanningProblem& problem,
                            const PerTemplate<PipelineTemplate>& templates,
                            const Instantiation& inst) {
  if (inst.pipelines.size() < 2) return 0;
  // Each node's NIC carries the rings of the layers it holds one after another; different
  // nodes run theirs in parallel. Per pipeline, the busiest of its nodes.
  double worst = 0;
  for (const Pipeline& p : inst.pipelines)
    worst = std::max(worst, busiest_node_sync_s(problem, templates[p.template_index]));
  const double r = static_cast<double>(inst.pipelines.size());
  return worst * 2.0 * (r - 1) / r;
}

double busiest_node_sync_s(const PlanningProblem& problem, const PipelineTemplate& t) {
  PerPipelineNode<double> per_node(t.nodes, 0);
  const auto first_layer = problem.layers.begin();
  for (const TemplateStage& s : t.stages) {
    for (const LayerCost& layer : std::span(first_layer + s.layer_begin, first_layer + s.layer_end))
      per_node[s.node] += layer.allreduce_across_nodes_s;
  }
  double busiest = 0;
  for (const double v : per_node) busiest = std::max(busiest, v);
  return busiest;
}

void evaluate(const PlanningProblem& problem, const PerTemplate<PipelineTemplate>& templates,
              Instantiation& inst) {
  double slowest = 0;
  for (const Pipeline& p : inst.pipelines) {
    slowest = std::max(slowest, templates[p.template_index].iteration_time_s(p.microbatches));
  }
  inst.sync_time_s = gradient_sync_time_s(problem, templates, inst);
  inst.iteration_time_s = slowest + inst.sync_time_s;
}

}  // namespace loom::oobleck
