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
  PerModule<int> group_of(model.modules().ssize());
  for (size_t g = 0; g < h.groups.size(); ++g) {
    for (const ModuleId m : h.groups[g].modules) group_of[m] = static_cast<int>(g);
  }
  h.layers.resize(h.groups.size());
  const LayerGraph graph(model);  // the one rule of who feeds whom (core/dataflow.hpp)
  h.consumers.resize(h.groups.size());
  for (int l = 0; l < model.num_layers(); ++l) {
    const int g = group_of[model.module_of(l)];
    h.layers[static_cast<size_t>(g)].push_back(l);
    for (int c : graph.consumers(l)) {
      const int cg = group_of[model.module_of(c)];
      auto& list = h.consumers[static_cast<size_t>(g)];
      if (cg != g && std::find(list.begin(), list.end(), cg) == list.end()) list.push_back(cg);
    }
  }
  return h;
}

}  // namespace loom
