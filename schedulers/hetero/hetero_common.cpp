#include "schedulers/hetero/hetero_common.hpp"

#include <algorithm>

#include "core/dataflow.hpp"
#include "core/errors.hpp"
#include "core/memory_model.hpp"

namespace loom {
HeteroGroups hetero_groups(const SchedulingProblem& problem, const std::string& scheduler,
                           bool colocated_placement) {
  const Model& model = *problem.model;
  std::vector<ModuleLayout> layouts = problem.parallel.module_layouts;
  if (layouts.empty()) {  // a single-layout config: core/layout.hpp's default remap
    const ParallelConfig& pc = problem.parallel;
    layouts =
        default_module_layouts(model, pc.pp, pc.dp, pc.tp, colocated_placement, *problem.cluster);
  }
  HeteroGroups h;
  h.derived = problem.parallel.module_layouts.empty();
  h.groups = layout_groups(model, layouts);
  int llms = 0;
  for (size_t g = 0; g < h.groups.size(); ++g) {
    if (model.module(h.groups[g].owner).kind == ModuleKind::kLlm) {
      h.llm = static_cast<int>(g);
      ++llms;
    } else {
      h.encoders.push_back(static_cast<int>(g));
    }
  }
  if (llms != 1) {
    throw InputError("model.modules: scheduler '" + scheduler +
                     "' needs exactly one llm module, got " + std::to_string(llms));
  }
  std::vector<int> group_of(model.modules().size());
  for (size_t g = 0; g < h.groups.size(); ++g) {
    for (int m : h.groups[g].modules) group_of[static_cast<size_t>(m)] = static_cast<int>(g);
  }
  h.layers.resize(h.groups.size());
  const LayerGraph graph(model);  // the one rule of who feeds whom (core/dataflow.hpp)
  h.consumers.resize(h.groups.size());
  for (int l = 0; l < model.num_layers(); ++l) {
    const int g = group_of[static_cast<size_t>(model.layers()[static_cast<size_t>(l)].module)];
    h.layers[static_cast<size_t>(g)].push_back(l);
    for (int c : graph.consumers(l)) {
      const int cg = group_of[static_cast<size_t>(model.layers()[static_cast<size_t>(c)].module)];
      auto& list = h.consumers[static_cast<size_t>(g)];
      if (cg != g && std::find(list.begin(), list.end(), cg) == list.end()) list.push_back(cg);
    }
  }
  return h;
}

double boundary_bytes_per_sample(const SchedulingProblem& problem, int last_layer,
                                 const std::vector<int>& microbatch) {
  std::vector<const Sample*> batch;
  for (int id : microbatch) batch.push_back(&problem.samples.at(static_cast<size_t>(id)));
  const MicrobatchShape shape = layer_shape(*problem.model, last_layer, batch);
  return problem.cost->output_bytes(last_layer, shape) / static_cast<double>(batch.size());
}

void add_optimizer_steps(const SchedulingProblem& problem, Schedule& schedule) {
  const MemoryConstants& memory = problem.memory;
  const Model& model = *problem.model;
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    const StaticMemory& state = schedule.static_memory[static_cast<size_t>(r)];
    const double updated = memory.optimizer_bytes_per_param > 0
                               ? state.optimizer / memory.optimizer_bytes_per_param
                               : state.gradients / std::max(memory.gradient_bytes_per_param, 1.0);
    if (updated <= 0) continue;
    // Label and weight width from the rank's last computation that trains weights.
    auto& program = schedule.programs[static_cast<size_t>(r)];
    const Compute* last = nullptr;
    for (const Op& op : program) {
      const auto* c = std::get_if<Compute>(&op);
      if (c && !c->redundant && c->weight_grad_s > 0) last = c;
    }
    if (!last) continue;
    const double seconds = problem.cost->optimizer_step_seconds(
        optimizer_step_bytes(updated, model.layer(last->first_layer).dtype_bytes, memory));
    if (seconds <= 0) continue;
    program.push_back(OptimizerStep{
        .stage = last->stage, .module = last->module, .parameters = updated, .seconds = seconds});
  }
}

double gradient_bytes(const SchedulingProblem& problem, const std::vector<int>& layers, int tp) {
  double bytes = 0;
  for (int l : layers) {
    if (!problem.model->layer(l).frozen)
      bytes += problem.cost->parameters(l) / tp * problem.memory.gradient_bytes_per_param;
  }
  return bytes;
}

int GroupTable::id(const std::vector<int>& ranks) {
  auto& groups = schedule_->groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g] == ranks) return static_cast<int>(g);
  }
  groups.push_back(ranks);
  return static_cast<int>(groups.size() - 1);
}

}  // namespace loom
