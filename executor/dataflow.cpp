#include "executor/dataflow.hpp"

#include <algorithm>
#include <set>
#include <variant>

namespace loom::exec {

LayerGraph::LayerGraph(const Model& model) : model_(&model) {
  const int n = model.num_layers();
  producers_.resize(static_cast<size_t>(n));
  consumers_.resize(static_cast<size_t>(n));
  std::vector<int> last_of_module(model.modules().size(), -1);
  for (int l = 0; l < n; ++l)
    last_of_module[static_cast<size_t>(model.layers()[static_cast<size_t>(l)].module)] = l;
  for (int l = 0; l < n; ++l) {
    const LayerRef& ref = model.layers()[static_cast<size_t>(l)];
    auto& producers = producers_[static_cast<size_t>(l)];
    if (ref.local_index > 0) {
      producers.push_back(l - 1);
    } else {
      for (const std::string& input : model.module(ref.module).inputs)
        producers.push_back(last_of_module[static_cast<size_t>(model.module_index(input))]);
      std::sort(producers.begin(), producers.end());
    }
    for (int p : producers) consumers_[static_cast<size_t>(p)].push_back(l);
  }
}

std::vector<EdgeKey> forward_inputs(const LayerGraph& graph, const Compute& op) {
  std::vector<EdgeKey> out;
  for (int p : graph.producers(op.first_layer))
    out.push_back({Pass::kF, op.microbatch, p, op.first_layer});
  return out;
}

std::vector<EdgeKey> forward_outputs(const LayerGraph& graph, const Compute& op) {
  std::vector<EdgeKey> out;
  const int last = op.end_layer - 1;
  for (int c : graph.consumers(last)) out.push_back({Pass::kF, op.microbatch, last, c});
  return out;
}

std::vector<EdgeKey> backward_inputs(const LayerGraph& graph, const Compute& op) {
  std::vector<EdgeKey> out;
  const int last = op.end_layer - 1;
  if (!graph.model().has_trainable_upstream(last)) return out;
  for (int c : graph.consumers(last)) out.push_back({Pass::kB, op.microbatch, last, c});
  return out;
}

std::vector<EdgeKey> backward_outputs(const LayerGraph& graph, const Compute& op) {
  std::vector<EdgeKey> out;
  for (int p : graph.producers(op.first_layer)) {
    if (graph.model().has_trainable_upstream(p))
      out.push_back({Pass::kB, op.microbatch, p, op.first_layer});
  }
  return out;
}

std::vector<int> rank_layers(const Schedule& schedule, int rank) {
  std::set<int> layers;
  for (const Op& op : schedule.programs.at(static_cast<size_t>(rank))) {
    const auto* c = std::get_if<Compute>(&op);
    if (!c || c->pass != Pass::kF || is_redundant(*c)) continue;
    for (int l = c->first_layer; l < c->end_layer; ++l) layers.insert(l);
  }
  return {layers.begin(), layers.end()};
}

std::map<int, std::vector<int>> allreduce_layers(const Schedule& schedule, const Model& model,
                                                 int rank) {
  const auto& program = schedule.programs.at(static_cast<size_t>(rank));
  std::map<int, std::vector<int>> out;
  std::map<int, int> module_op;  // module -> its (last) all-reduce on this rank
  int last_op = -1;
  for (size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Collective>(&program[i]);
    if (!c || c->kind != CollectiveKind::kAllReduce) continue;
    out[static_cast<int>(i)];
    module_op[c->module] = static_cast<int>(i);
    last_op = static_cast<int>(i);
  }
  if (last_op < 0) return out;
  for (int l : rank_layers(schedule, rank)) {
    if (model.layer(l).frozen) continue;
    const auto it = module_op.find(model.layers()[static_cast<size_t>(l)].module);
    out[it == module_op.end() ? last_op : it->second].push_back(l);
  }
  return out;
}

}  // namespace loom::exec
