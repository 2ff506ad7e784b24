#include "core/cost_recompute.hpp"

namespace loom {

RecomputeCostModel::RecomputeCostModel(const Model& model, Recompute global,
                                       std::unique_ptr<CostModel> inner)
    : model_(model), global_(global), inner_(std::move(inner)) {}

PassCost RecomputeCostModel::layer_cost(int layer, const MicrobatchShape& shape, int tp) const {
  PassCost c = inner_->layer_cost(layer, shape, tp);
  if (!full(layer)) return c;
  c.input_grad_s += c.forward_s;  // re-run the forward before backpropagating through it
  return c;
}

double RecomputeCostModel::activation_bytes(int layer, const MicrobatchShape& shape, int tp) const {
  if (!full(layer)) return inner_->activation_bytes(layer, shape, tp);
  const LayerSpec& spec = model_.layer(layer);
  return shape.total_tokens() * spec.hidden * spec.dtype_bytes;
}

nlohmann::json RecomputeCostModel::describe() const {
  nlohmann::json j = inner_->describe();
  j["recompute"] = to_string(global_);
  if (auto modules = module_recompute(model_); !modules.empty()) j["module_recompute"] = modules;
  return j;
}

}  // namespace loom
