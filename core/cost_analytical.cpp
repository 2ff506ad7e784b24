#include "core/cost_analytical.hpp"

#include "core/errors.hpp"

namespace loom {

AnalyticalCostModel::AnalyticalCostModel(const Model& model, const Cluster& cluster,
                                         double efficiency)
    : model_(model), cluster_(cluster), efficiency_(efficiency) {
  if (!(efficiency > 0 && efficiency <= 1)) {
    throw InputError("cost.efficiency: must be in (0, 1], got " + std::to_string(efficiency));
  }
}

namespace {

double ring_allreduce_s(double bytes, int tp, const LinkSpec& link) {
  if (tp <= 1) return 0.0;
  return 2.0 * (tp - 1) / tp * bytes / link.bandwidth + 2.0 * (tp - 1) * link.latency;
}

}  // namespace

PassCost AnalyticalCostModel::layer_cost(int layer, const MicrobatchShape& shape, int tp) const {
  const LayerSpec& spec = model_.layer(layer);
  const double tokens = shape.total_tokens();
  const double linear_flops = 2.0 * tokens * layer_parameters(spec);
  double attention_flops = 0;
  if (spec.kind == LayerKind::kTransformer) {
    attention_flops = 4.0 * shape.sum_squared() * spec.hidden * (spec.causal ? 0.5 : 1.0);
  }
  const double rate = tp * cluster_.gpu.peak_flops * efficiency_;
  // Megatron-style TP: two all-reduces of the layer's activations per pass.
  double tp_comm = 0;
  if (spec.kind == LayerKind::kTransformer) {
    tp_comm =
        2 * ring_allreduce_s(tokens * spec.hidden * spec.dtype_bytes, tp, cluster_.intra_node);
  }
  PassCost c;
  c.forward_s = (linear_flops + attention_flops) / rate + tp_comm;
  c.input_grad_s = (linear_flops + 2 * attention_flops) / rate + tp_comm;
  c.weight_grad_s = linear_flops / rate;
  return c;
}

double AnalyticalCostModel::activation_bytes(int layer, const MicrobatchShape& shape,
                                             int tp) const {
  const LayerSpec& spec = model_.layer(layer);
  const double tokens = shape.total_tokens();
  if (spec.kind == LayerKind::kMlp) return tokens * (spec.hidden + spec.ffn) * spec.dtype_bytes;
  return tokens * spec.hidden * (10.0 + 24.0 / tp) * spec.dtype_bytes / 2.0;
}

double AnalyticalCostModel::output_bytes(int layer, const MicrobatchShape& shape) const {
  const LayerSpec& spec = model_.layer(layer);
  const int width = spec.kind == LayerKind::kMlp ? spec.out_hidden : spec.hidden;
  return shape.total_tokens() * width * spec.dtype_bytes;
}

double AnalyticalCostModel::parameters(int layer) const {
  return layer_parameters(model_.layer(layer));
}

nlohmann::json AnalyticalCostModel::describe() const {
  return {{"name", name()},
          {"efficiency", efficiency_},
          {"gpu", cluster_.gpu.name},
          {"peak_flops", cluster_.gpu.peak_flops}};
}

}  // namespace loom
