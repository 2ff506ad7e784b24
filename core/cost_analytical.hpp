#pragma once
/// `analytical`: per-layer costs from the layer's shapes, two ways.
///
/// Kernel-level (the default): the layer is the list of kernels of core/layer_kernels.hpp,
/// each timed by core/gpu_perf.hpp (GEMMs by tile and wave quantization over the SMs,
/// memory-bound kernels by bytes over bandwidth, launches, TP collectives on the intra-node
/// links). Efficiency emerges from the shapes. F sums the forward kernels, Bd (I) the
/// data-gradient kernels and the backward TP collectives, Bw (W) the weight-gradient GEMMs.
/// Recompute adds to Bd what it re-runs: the whole forward (full) or the attention core
/// (selective, Korthikanti et al. 2022 §4.2).
///
/// Fixed fraction (`cost.efficiency` set): FLOPs at that fraction of peak.
/// Per transformer layer and sample of s tokens (h hidden, f FFN, GQA width k):
///   linear FLOPs    2 s (2h^2 + 2hk + m h f)      m = 3 gated MLP, 2 otherwise
///   attention FLOPs 4 s^2 h x (1/2 if causal)      QK^T and AV
///   F  = (linear + attention) / (tp x peak x efficiency) + 2 TP all-reduces of s h
///   Bd = (linear + 2 attention) / (...)             + 2 TP all-reduces
///   Bw = linear / (...)
/// Activations kept per layer: s h (10 + 24/tp) x dtype/2 bytes (Korthikanti et al. 2022,
/// Eq 2 without the s^2 score term). An MLP layer keeps s (h + f) x dtype.
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cost_model.hpp"
#include "core/layer_kernels.hpp"

namespace loom {

struct AnalyticalOptions {
  double efficiency = 0;  ///< > 0: fixed fraction of peak; 0: the kernel-level model
  bool flash_attention = true;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  ///< TP collectives hidden behind the pass's GEMMs
  TpOverlap tp_overlap = TpOverlap::kRingExchange;  ///< how, when they are (cost.tp_overlap)
  bool gradient_accumulation_fusion = false;        ///< wgrad GEMMs add into the fp32 buffer
  Recompute recompute = Recompute::kNone;
  RecomputeModules recompute_modules = {};  ///< what selective recompute re-runs
  /// Gradient buffer bytes per parameter (weight-gradient accumulation per microbatch).
  double gradient_bytes_per_param = 0;
  Fp8Recipe fp8 = Fp8Recipe::kOff;  ///< cost.fp8
  /// cost.fp8_bf16_layers: first and last N transformer layers of an LLM module in BF16.
  int fp8_bf16_layers = 0;
  int microbatches = 1;     ///< per step: FP8 weight casts are once per step
  int expert_parallel = 1;  ///< parallel.ep: local experts and their tokens (docs/moe.md)
};

class AnalyticalCostModel final : public CostModel {
 public:
  AnalyticalCostModel(const Model& model, const Cluster& cluster, AnalyticalOptions options);
  /// Fixed-fraction model (what `cost.efficiency` selects).
  AnalyticalCostModel(const Model& model, const Cluster& cluster, double efficiency);
  std::string name() const override { return "analytical"; }
  PassCost layer_cost(int layer, const MicrobatchShape& shape, int tp) const override;
  double activation_bytes(int layer, const MicrobatchShape& shape, int tp) const override;
  double output_bytes(int layer, const MicrobatchShape& shape) const override;
  double parameters(int layer) const override;
  double embedding_parameters(int layer) const override;
  /// Bytes over the GPU's achievable memory bandwidth plus one launch (core/gpu_perf.hpp).
  double optimizer_step_seconds(double bytes) const override;
  MoePhases moe_phases(int layer, const MicrobatchShape& shape, int tp) const override;
  nlohmann::json describe() const override;

  /// The kernels of one layer for one microbatch (kernel-level mode; `loom cost`).
  std::vector<Kernel> kernels(int layer, const MicrobatchShape& shape, int tp) const;
  bool kernel_level() const { return options_.efficiency <= 0; }
  const AnalyticalOptions& options() const { return options_; }
  /// The layer's module's own recompute, else cost.recompute.
  Recompute recompute_of(int layer) const {
    return effective_recompute(model_.layer(layer), options_.recompute);
  }

 private:
  PassCost fixed_fraction_cost(int layer, const MicrobatchShape& shape, int tp) const;
  PassCost kernel_cost(int layer, const MicrobatchShape& shape, int tp) const;
  LayerKernelOptions kernel_options(int layer) const;

  const Model& model_;
  Cluster cluster_;
  AnalyticalOptions options_;
  /// Layers with equal shapes and vocabulary roles share one class (and one cache entry).
  PerLayer<int> layer_class_;
  mutable std::mutex cache_mutex_;
  mutable std::map<std::tuple<int, int, std::vector<int>>, PassCost> cache_;
};

/// A cost model that times layers its own way (a fitted profile) and takes everything a
/// timing does not measure, the sizes, parameter counts and the optimizer step, from the
/// analytical model of the same model and cluster.
class AnalyticalSizes : public CostModel {
 public:
  double activation_bytes(int layer, const MicrobatchShape& shape, int tp) const override {
    return shapes_.activation_bytes(layer, shape, tp);
  }
  double output_bytes(int layer, const MicrobatchShape& shape) const override {
    return shapes_.output_bytes(layer, shape);
  }
  double parameters(int layer) const override { return shapes_.parameters(layer); }
  double embedding_parameters(int layer) const override {
    return shapes_.embedding_parameters(layer);
  }
  double optimizer_step_seconds(double bytes) const override {
    return shapes_.optimizer_step_seconds(bytes);
  }

 protected:
  AnalyticalSizes(const Model& model, const Cluster& cluster) : shapes_(model, cluster, 1.0) {}

 private:
  AnalyticalCostModel shapes_;
};

}  // namespace loom
