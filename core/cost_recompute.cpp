#include "core/cost_recompute.hpp"

namespace loom {

RecomputeCostModel::RecomputeCostModel(const Model& model, std::unique_ptr<CostModel> inner)
    : model_(model), inner_(std::move(inner)) {}

PassCost RecomputeCostModel::layer_cost(int layer, const MicrobatchShape& shape, int tp) const {
  PassCost c = inner_->layer_cost(layer, shape, tp);
  c.input_grad_s += c.forward_s;  // re-run the forward before backpropagating through it
  return c;
}

double RecomputeCostModel::activation_bytes(int layer, const MicrobatchShape& shape, int) const {
  const LayerSpec& spec = model_.layer(layer);
  return shape.total_tokens() * spec.hidden * spec.dtype_bytes;
}

nlohmann::json RecomputeCostModel::describe() const {
  nlohmann::json j = inner_->describe();
  j["activation_checkpointing"] = true;
  return j;
}

}  // namespace loom
