#include "schedulers/hetero/hetero_common.hpp"

#include <algorithm>

#include "core/dataflow.hpp"
#include "core/errors.hpp"

namespace loom {

HeteroGroups hetero_groups(const SchedulingProblem& problem, const std::string& scheduler,
                           bool colocated_placement) {
  const Model& model = *problem.model;
  PerModule<ModuleLayout> layouts = problem.parallel.module_layouts;
  if (layouts.empty()) {  // a single-layout config: core/layout.hpp's default remap
    const ParallelConfig& pc = problem.parallel;
    layouts =
        default_module_layouts(model, pc.pp, pc.dp, pc.tp, colocated_placement, *problem.cluster);
  }
  HeteroGroups h;
  h.groups = PerLayoutGroup<LayoutGroup>(layout_groups(model, layouts));
  int llms = 0;
  for (const LayoutGroupId g : h.groups.ids()) {
    if (model.module(h.groups[g].owner).kind == ModuleKind::kLlm) {
      h.llm = g;
      ++llms;
    } else {
      h.encoders.push_back(g);
    }
  }
  if (llms != 1) {
    throw InputError("model.modules: scheduler '" + scheduler +
                     "' needs exactly one llm module, got " + std::to_string(llms));
  }
  PerModule<LayoutGroupId> group_of(model.modules().ssize());
  for (const LayoutGroupId g : h.groups.ids()) {
    for (const ModuleId m : h.groups[g].modules) group_of[m] = g;
  }
  h.layers.resize(h.groups.ssize());
  const LayerGraph graph(model);  // the one rule of who feeds whom (core/dataflow.hpp)
  h.consumers.resize(h.groups.ssize());
  for (int l = 0; l < model.num_layers(); ++l) {
    const LayoutGroupId g = group_of[model.module_of(l)];
    h.layers[g].push_back(l);
    for (int c : graph.consumers(l)) {
      const LayoutGroupId cg = group_of[model.module_of(c)];
      auto& list = h.consumers[g];
      if (cg != g && std::find(list.begin(), list.end(), cg) == list.end()) list.push_back(cg);
    }
  }
  return h;
}

}  // namespace loom
