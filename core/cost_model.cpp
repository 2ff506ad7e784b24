#include "core/cost_model.hpp"

namespace loom {

PassCost effective_cost(const CostModel& cost, const Model& model, int layer,
                        const MicrobatchShape& shape, int tp) {
  PassCost c = cost.layer_cost(layer, shape, tp);
  if (model.layer(layer).frozen) c.weight_grad_s = 0;
  if (!model.has_trainable_upstream(layer)) c.input_grad_s = 0;
  return c;
}

}  // namespace loom
