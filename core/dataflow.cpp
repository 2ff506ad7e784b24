#include "core/dataflow.hpp"

#include <algorithm>

namespace loom {

LayerGraph::LayerGraph(const Model& model, BackwardRule rule)
    : model_(&model), every_layer_(rule == BackwardRule::kEveryLayer) {
  const int n = model.num_layers();
  producers_.resize(n);
  consumers_.resize(n);
  PerModule<int> last_of_module(model.modules().ssize(), -1);
  for (int l = 0; l < n; ++l) last_of_module[model.module_of(l)] = l;
  for (int l = 0; const LayerRef& ref : model.layers()) {
    std::vector<int> producers;
    if (ref.local_index > 0) {
      producers.push_back(l - 1);
    } else {
      for (const ModuleId input : model.inputs(ref.module))
        producers.push_back(last_of_module[input]);
      std::sort(producers.begin(), producers.end());
    }
    for (int p : producers) consumers_[LayerId{p}].push_back(l);
    producers_[LayerId{l}] = std::move(producers);
    ++l;
  }
}

std::vector<DataEdge> forward_inputs(const LayerGraph& graph, const Compute& op) {
  std::vector<DataEdge> out;
  for (int p : graph.producers(op.first_layer))
    out.push_back({Pass::kF, op.microbatch, p, op.first_layer});
  return out;
}

std::vector<DataEdge> forward_outputs(const LayerGraph& graph, const Compute& op) {
  std::vector<DataEdge> out;
  const int last = op.end_layer - 1;
  for (int c : graph.consumers(last)) out.push_back({Pass::kF, op.microbatch, last, c});
  return out;
}

std::vector<DataEdge> backward_inputs(const LayerGraph& graph, const Compute& op) {
  std::vector<DataEdge> out;
  const int last = op.end_layer - 1;
  if (!graph.needs_backward(last)) return out;
  for (int c : graph.consumers(last)) out.push_back({Pass::kB, op.microbatch, last, c});
  return out;
}

std::vector<DataEdge> backward_outputs(const LayerGraph& graph, const Compute& op) {
  std::vector<DataEdge> out;
  for (int p : graph.producers(op.first_layer)) {
    if (graph.needs_backward(p)) out.push_back({Pass::kB, op.microbatch, p, op.first_layer});
  }
  return out;
}

std::vector<DataEdge> op_inputs(const LayerGraph& graph, const Compute& op) {
  switch (op.pass) {
    case Pass::kF:
      return forward_inputs(graph, op);
    case Pass::kB:
    case Pass::kI:
      return backward_inputs(graph, op);
    case Pass::kW:
      break;
  }
  return {};
}

std::vector<DataEdge> op_outputs(const LayerGraph& graph, const Compute& op) {
  switch (op.pass) {
    case Pass::kF:
      return forward_outputs(graph, op);
    case Pass::kB:
    case Pass::kI:
      return backward_outputs(graph, op);
    case Pass::kW:
      break;
  }
  return {};
}

}  // namespace loom
