#include "core/cost_table.hpp"

#include "core/errors.hpp"

namespace loom {

TableCostModel::TableCostModel(const Model& model, std::map<std::string, TableEntry> entries)
    : model_(model) {
  for (const Module& m : model.modules()) {
    const auto it = entries.find(m.name);
    if (it == entries.end()) {
      throw InputError("cost.table." + m.name +
                       ": missing (the table cost model needs an entry "
                       "for every module)");
    }
    by_module_.push_back(it->second);
    entries.erase(it);
  }
  if (!entries.empty()) {
    throw InputError("cost.table." + entries.begin()->first + ": no module of that name");
  }
}

const TableEntry& TableCostModel::entry(int layer) const {
  return by_module_[model_.module_of(layer)];
}

PassCost TableCostModel::layer_cost(int layer, const MicrobatchShape&, int) const {
  const TableEntry& e = entry(layer);
  return {e.forward_s, e.input_grad_s, e.weight_grad_s};
}

double TableCostModel::activation_bytes(int layer, const MicrobatchShape&, int) const {
  return entry(layer).activation_bytes;
}

double TableCostModel::output_bytes(int layer, const MicrobatchShape&) const {
  return entry(layer).output_bytes;
}

double TableCostModel::parameters(int layer) const {
  return entry(layer).parameters;
}

}  // namespace loom
