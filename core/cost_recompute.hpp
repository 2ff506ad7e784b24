#pragma once
/// Full activation checkpointing (recompute) as a decorator over any cost model:
/// `cost.recompute = "full"`, or a module's own `recompute = "full"` (the layers of the
/// other modules pass through). Cornstarch's measurements run with it
/// (cornstarch-arxiv §2.3.1, Fig 3b: "with activation checkpointing"), and the MLLMs of
/// dissertation Table 3.1 at microbatch 4 would not fit an A40 without it.
///   - A layer keeps only its input for the backward: s x h x dtype bytes per sample of
///     s tokens (its TP shard is not split: Megatron without sequence parallelism).
///   - The backward first re-runs the forward, so Bd grows by F. effective_cost() then
///     drops it together with Bd where p(L) is false (Eq 3.2-3.3): a layer with nothing
///     trainable upstream has no backward and recomputes nothing.
/// The transient activations of the one layer being recomputed are not counted.
#include "core/cost_model.hpp"

namespace loom {

class RecomputeCostModel final : public CostModel {
 public:
  /// `global`: cost.recompute; a layer whose module sets its own `recompute` follows that
  /// (only "full" and "none" reach this decorator: selective needs the kernel-level model).
  RecomputeCostModel(const Model& model, Recompute global, std::unique_ptr<CostModel> inner);
  std::string name() const override { return inner_->name() + "+recompute"; }
  PassCost layer_cost(int layer, const MicrobatchShape& shape, int tp) const override;
  /// The inner model's: what full recompute adds re-runs the whole layer before its
  /// backward, outside the all-to-alls' phases.
  MoePhases moe_phases(int layer, const MicrobatchShape& shape, int tp) const override {
    return inner_->moe_phases(layer, shape, tp);
  }
  double activation_bytes(int layer, const MicrobatchShape& shape, int tp) const override;
  double output_bytes(int layer, const MicrobatchShape& shape) const override {
    return inner_->output_bytes(layer, shape);
  }
  double parameters(int layer) const override { return inner_->parameters(layer); }
  double embedding_parameters(int layer) const override {
    return inner_->embedding_parameters(layer);
  }
  double optimizer_step_seconds(double bytes) const override {
    return inner_->optimizer_step_seconds(bytes);
  }
  bool prices_tokens() const override { return inner_->prices_tokens(); }
  nlohmann::json describe() const override;

 private:
  bool full(int layer) const {
    return effective_recompute(model_.layer(layer), global_) == Recompute::kFull;
  }

  const Model& model_;
  Recompute global_;
  std::unique_ptr<CostModel> inner_;
};

}  // namespace loom
