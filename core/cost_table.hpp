#pragma once
/// `table`: fixed per-layer times and sizes from the config, independent of tokens and
/// TP degree, for synthetic and textbook studies (e.g. "each layer 0.5 ms forward and
/// 1.0 ms backward per microbatch").
#include <map>

#include "core/cost_model.hpp"

namespace loom {

/// Per-layer entry of one module (all its layers alike).
struct TableEntry {
  double forward_s = 0;
  double input_grad_s = 0;
  double weight_grad_s = 0;
  double activation_bytes = 0;  ///< kept per microbatch for the backward
  double output_bytes = 0;      ///< sent across a stage boundary per microbatch
  double parameters = 0;
};

class TableCostModel final : public CostModel {
 public:
  /// `entries` by module name; every module of the model needs one (InputError otherwise).
  TableCostModel(const Model& model, std::map<std::string, TableEntry> entries);
  std::string name() const override { return "table"; }
  PassCost layer_cost(int layer, const MicrobatchShape& shape, int tp) const override;
  double activation_bytes(int layer, const MicrobatchShape& shape, int tp) const override;
  double output_bytes(int layer, const MicrobatchShape& shape) const override;
  double parameters(int layer) const override;
  bool prices_tokens() const override { return false; }

 private:
  const TableEntry& entry(int layer) const;
  const Model& model_;
  PerModule<TableEntry> by_module_;
};

}  // namespace loom
