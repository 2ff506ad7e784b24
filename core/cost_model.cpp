#include "core/cost_model.hpp"

namespace loom {

PassCost effective_cost(const CostModel& cost, const Model& model, int layer,
                        const MicrobatchShape& shape, int tp) {
  PassCost c = cost.layer_cost(layer, shape, tp);
  if (model.layer(layer).frozen) c.weight_grad_s = 0;
  if (!model.has_trainable_upstream(layer)) c.input_grad_s = 0;
  // An MLP whose input needs no gradient (a projector after a frozen encoder) still
  // backpropagates through its second matrix to reach its first one's weights, but skips
  // the first matrix's input-gradient GEMM, as the executors do (executor/layer_math.cpp,
  // need_dx). Of the two input-gradient GEMMs, T x ffn x h_in and T x ffn x h_out, the
  // second remains. (A transformer layer skips only its first norm's backward: its
  // projections' input gradients feed that norm's gain.)
  const LayerSpec& spec = model.layer(layer);
  if (spec.kind == LayerKind::kMlp && !model.input_needs_gradient(layer)) {
    const double in = spec.hidden, out = spec.out_hidden;
    if (in + out > 0) c.input_grad_s *= out / (in + out);
  }
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
