// Costs of context parallelism shared by the single layout (parallel.cp) and per-module
// layouts (module_shards.cpp): the attention / linear split of a layer and the padding.
#include "schedulers/lowering/context_parallel.hpp"

#include <algorithm>

namespace loom {
namespace {

/// Each sequence cut in two: same tokens, less attention.
MicrobatchShape halved(const MicrobatchShape& shape) {
  MicrobatchShape out;
  for (int s : shape.sequence_lengths) {
    if (s >= 2) {
      out.sequence_lengths.push_back(s / 2);
      out.sequence_lengths.push_back(s - s / 2);
    } else {
      out.sequence_lengths.push_back(s);
    }
  }
  return out;
}

}  // namespace

PassCost scale_add(const PassCost& a, double fa, const PassCost& b, double fb) {
  return {a.forward_s * fa + b.forward_s * fb, a.input_grad_s * fa + b.input_grad_s * fb,
          a.weight_grad_s * fa + b.weight_grad_s * fb};
}

AttentionSplit split_attention(const CostModel& cost, const Model& model, int layer,
                               const MicrobatchShape& shape, int tp) {
  const PassCost full = effective_cost(cost, model, layer, shape, tp);
  const MicrobatchShape half = halved(shape);
  const PassCost h = effective_cost(cost, model, layer, half, tp);
  // Attention scales with sum(s^2): full - half = attention x (1 - sum_sq(half) / sum_sq).
  const double dsq = shape.sum_squared() - half.sum_squared();
  const double k = dsq > 0 ? shape.sum_squared() / dsq : 0.0;
  const PassCost attention = scale_add(full, k, h, -k);
  return {.linear = scale_add(full, 1.0, attention, -1.0), .attention = attention};
}

MicrobatchShape cp_rank_shape(const MicrobatchShape& shape, int cp) {
  MicrobatchShape rank;
  for (int s : shape.sequence_lengths)
    rank.sequence_lengths.push_back(std::max(1, (s + cp - 1) / cp));
  return rank;
}

PassCost rank_linear_cost(const CostModel& cost, const Model& model, int layer,
                          const MicrobatchShape& shape, int tp, int cp,
                          const AttentionSplit& whole) {
  if (!cost.prices_tokens()) return scale_add(whole.linear, 1.0 / cp, PassCost{}, 0.0);
  // Every sequence cut to 1/cp keeps 1/cp^2 of its attention (the s^2 split_attention
  // separates by): the rest of the layer's cost at that shape is its linear work. A fit
  // (calibrated) may leave less than nothing at a small shape: no pass goes below zero.
  const double cp2 = double(cp) * cp;
  PassCost c = scale_add(effective_cost(cost, model, layer, cp_rank_shape(shape, cp), tp), 1.0,
                         whole.attention, -1.0 / cp2);
  c.forward_s = std::max(0.0, c.forward_s);
  c.input_grad_s = std::max(0.0, c.input_grad_s);
  c.weight_grad_s = std::max(0.0, c.weight_grad_s);
  return c;
}

MicrobatchShape pad_for_context_parallel(const MicrobatchShape& shape, int cp) {
  MicrobatchShape out;
  const int chunk = 2 * cp;
  for (int s : shape.sequence_lengths)
    out.sequence_lengths.push_back((s + chunk - 1) / chunk * chunk);
  return out;
}

double linear_share_before_attention(const LayerSpec& layer) {
  const double h = layer.hidden;
  const double head_dim = layer.heads > 0 ? h / layer.heads : h;
  const double kv = layer.kv_heads * head_dim;
  const double qkv = h * (h + 2 * kv);
  const double after = h * h + (layer.gated_mlp ? 3.0 : 2.0) * h * layer.ffn;
  return qkv + after > 0 ? qkv / (qkv + after) : 0.0;
}

}  // namespace loom
