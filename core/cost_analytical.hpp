#pragma once
/// `analytical`: FLOP counts at a stated fraction of the GPU's peak.
///
/// Per transformer layer and sample of s tokens (h hidden, f FFN, GQA width k):
///   linear FLOPs    2 s (2h^2 + 2hk + m h f)      m = 3 gated MLP, 2 otherwise
///   attention FLOPs 4 s^2 h x (1/2 if causal)      QK^T and AV
///   F  = (linear + attention) / (tp x peak x efficiency) + 2 TP all-reduces of s h
///   Bd = (linear + 2 attention) / (...)             + 2 TP all-reduces  (input grads;
///                                                     attention has no weights)
///   Bw = linear / (...)                                                 (weight grads)
/// TP all-reduce: ring on the intra-node links, 2(tp-1)/tp x bytes / bw + 2(tp-1) x lat.
/// Activations kept per layer: s h (10 + 24/tp) x dtype/2 bytes (Korthikanti et al. 2022,
/// "Reducing Activation Recomputation", Eq 2 without the s^2 score term, which
/// FlashAttention-style kernels do not store). An MLP layer keeps s (h + f) x dtype.
#include "core/cost_model.hpp"

namespace loom {

class AnalyticalCostModel final : public CostModel {
 public:
  AnalyticalCostModel(const Model& model, const Cluster& cluster, double efficiency);
  std::string name() const override { return "analytical"; }
  PassCost layer_cost(int layer, const MicrobatchShape& shape, int tp) const override;
  double activation_bytes(int layer, const MicrobatchShape& shape, int tp) const override;
  double output_bytes(int layer, const MicrobatchShape& shape) const override;
  double parameters(int layer) const override;
  nlohmann::json describe() const override;

 private:
  const Model& model_;
  Cluster cluster_;
  double efficiency_;
};

}  // namespace loom
