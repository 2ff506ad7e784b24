#include "core/cost_model.hpp"

namespace loom {

PassCost effective_cost(const CostModel& cost, const Model& model, int layer,
                        const MicrobatchShape& shape, int tp) {
  PassCost c = cost.layer_cost(layer, shape, tp);
  if (model.layer(layer).frozen) c.weight_grad_s = 0;
  if (!model.has_trainable_upstream(layer)) c.input_grad_s = 0;
  // A measured backward / forward ratio (Module::backward_over_forward) rescales whatever
  // backward the frozen status leaves, keeping its input / weight gradient split.
  const double measured = model.module(model.module_of(layer)).backward_over_forward;
  if (measured > 0 && c.backward_s() > 0 && c.forward_s > 0) {
    const double scale = measured * c.forward_s / c.backward_s();
    c.input_grad_s *= scale;
    c.weight_grad_s *= scale;
  }
  return c;
}

}  // namespace loom
