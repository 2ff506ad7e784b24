#include "schedulers/multimodal/multimodal.hpp"

#include <algorithm>
#include <optional>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/index.hpp"
#include "schedulers/lowering/stage_graph.hpp"

namespace loom {

Branches split_branches(const Model& model, const char* scheduler_name) {
  Branches out;
  PerModule<std::optional<size_t>> branch_of(model.modules().ssize());  // none: the LLM
  for (const ModuleId m : model.modules().ids()) {
    const Module& mod = model.module(m);
    if (mod.kind == ModuleKind::kEncoder && mod.inputs.empty()) {
      branch_of[m] = out.encoders.size();
      out.encoders.emplace_back();
      out.names.push_back(mod.name);
    } else if (mod.kind == ModuleKind::kProjector && !mod.inputs.empty()) {
      // A projector rides with its (first) input's branch, as in Cornstarch's
      // ModalityModule(encoder, projector).
      branch_of[m] = branch_of[model.inputs(m).front()];
    }
  }
  for (int l = 0; l < model.num_layers(); ++l) {
    if (const std::optional<size_t> b = branch_of[model.module_of(l)])
      out.encoders[*b].push_back(l);
    else
      out.llm.push_back(l);
  }
  if (out.encoders.empty() || out.llm.empty()) {
    throw InputError("schedule.name: '" + std::string(scheduler_name) +
                     "' pipelines a multimodal model: it needs at least one encoder module "
                     "(kind = \"encoder\", no inputs) and an LLM it feeds");
  }
  return out;
}

std::vector<double> view_costs(const SchedulingProblem& problem) {
  // The representative microbatch: the first one of the iteration (as plan_stages()).
  return layer_costs(*problem.model, *problem.cost, problem.schedule.partition_view,
                     first_samples(problem.samples, problem.schedule.microbatch_size),
                     problem.parallel.tp);
}

namespace {

/// The costs of `layers` in order, `head_s` added to the first (it runs on that stage).
std::vector<double> sub_costs(const std::vector<int>& layers, const std::vector<double>& costs,
                              double head_s) {
  std::vector<double> out;
  for (int l : layers) out.push_back(costs[static_cast<size_t>(l)]);
  if (!out.empty()) out.front() += head_s;
  return out;
}

}  // namespace

std::vector<std::vector<Segment>> partition_branch(const Model& model,
                                                   const std::vector<int>& layers,
                                                   const std::vector<double>& costs, int stages,
                                                   const std::string& what, double head_s) {
  if (stages > isize(layers)) {
    throw InputError(what + ": " + std::to_string(stages) + " pipeline stages but it has only " +
                     std::to_string(layers.size()) + " layers (each stage needs at least one)");
  }
  std::vector<std::vector<Segment>> out;
  for (const StageRange& r : partition_min_bottleneck(sub_costs(layers, costs, head_s), stages)) {
    const auto begin = layers.begin();
    out.push_back(segments_of(model, std::vector<int>(begin + r.first, begin + r.end)));
  }
  return out;
}

StageGraph disaggregated_graph(const Model& model, const Branches& branches,
                               const std::vector<double>& costs,
                               const std::vector<int>& encoder_stages, int llm_stages) {
  StageGraph graph;
  for (size_t b = 0; b < branches.encoders.size(); ++b) {
    for (auto& piece : partition_branch(model, branches.encoders[b], costs, encoder_stages[b],
                                        "encoder '" + branches.names[b] + "'"))
      graph.push_back(StageSpec{.segments = piece});
  }
  for (auto& piece : partition_branch(model, branches.llm, costs, llm_stages, "LLM"))
    graph.push_back(StageSpec{.segments = piece});
  return graph;
}

double branch_bottleneck(const std::vector<int>& layers, const std::vector<double>& costs,
                         int stages, double head_s) {
  const std::vector<double> sub = sub_costs(layers, costs, head_s);
  double worst = 0;
  for (const StageRange& r : partition_min_bottleneck(sub, stages)) {
    double sum = 0;
    for (const double cost : layer_slice(sub, r.first, r.end)) sum += cost;
    worst = std::max(worst, sum);
  }
  return worst;
}

double predicted_iteration_s(const SchedulingProblem& problem, const StageGraph& graph) {
  const StageOrders orders =
      one_f_one_b_orders(stages_downstream(*problem.model, graph), problem.schedule.microbatches);
  const LoweringCosts view = problem.schedule.partition_view == PartitionView::kTrue
                                 ? LoweringCosts::kTrue
                                 : LoweringCosts::kNaive;
  const Schedule s = lower_stage_graph(problem, "prediction", graph, orders, view);
  return evaluate(s, *problem.cluster).iteration_time_s();
}

Schedule lower_multimodal(const SchedulingProblem& problem, const char* scheduler_name,
                          const StageGraph& graph) {
  const StageOrders orders =
      one_f_one_b_orders(stages_downstream(*problem.model, graph), problem.schedule.microbatches);
  return lower_stage_graph(problem, scheduler_name, graph, orders);
}

}  // namespace loom
