#pragma once
/// Cost models behind one interface. A cost model answers, for one layer and one
/// microbatch on a stage of `tp` GPUs: how long forward (F), backward-for-inputs (Bd, "I")
/// and backward-for-weights (Bw, "W") take, how many activation bytes the forward keeps,
/// how many bytes its output is (what crosses a stage boundary), and how many parameters
/// the layer has.
///
/// Implementations report raw costs as if every layer were trainable; frozen status is
/// applied once, in effective_cost() (dissertation Eq 3.2), so no model can forget it.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/cluster.hpp"
#include "core/model.hpp"
#include "core/workload.hpp"

namespace loom {

struct PassCost {
  double forward_s = 0;
  double input_grad_s = 0;   ///< Bd
  double weight_grad_s = 0;  ///< Bw
  double backward_s() const { return input_grad_s + weight_grad_s; }
};

/// The work of a mixture-of-experts layer (docs/moe.md) on each side of its token
/// all-to-alls, per pass: `experts` between dispatch and combine, `combined` after the
/// combine in the forward (before it in the backward); the rest of the layer's PassCost is
/// outside them. Zero for a dense layer, or a cost model that cannot tell.
struct MoePhases {
  PassCost experts;
  PassCost combined;
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;
  /// Raw per-pass time of `layer` for one microbatch, on a stage of `tp` GPUs.
  virtual PassCost layer_cost(int layer, const MicrobatchShape& shape, int tp) const = 0;
  /// Bytes the forward of `layer` keeps alive for its backward, per GPU.
  virtual double activation_bytes(int layer, const MicrobatchShape& shape, int tp) const = 0;
  /// Bytes of the layer's output for the microbatch (sent across a stage boundary).
  virtual double output_bytes(int layer, const MicrobatchShape& shape) const = 0;
  /// Parameter count of the layer (all TP shards together).
  virtual double parameters(int layer) const = 0;
  /// The part of parameters(layer) that is a tied input embedding (the first layer of a
  /// module with a vocabulary); 0 for every other layer and for models without one. Its
  /// LM head on the module's last layer shares these weights (Megatron-LM's GPT).
  virtual double embedding_parameters(int /*layer*/) const { return 0; }
  /// Seconds of an optimizer step that moves `bytes` through one GPU's memory (a
  /// memory-bound, fused multi-tensor Adam). 0: this model prices no optimizer step (the
  /// `table` model, whose times are all the user's).
  virtual double optimizer_step_seconds(double /*bytes*/) const { return 0; }
  /// How layer_cost() of a MoE layer splits around its all-to-alls (docs/moe.md).
  virtual MoePhases moe_phases(int /*layer*/, const MicrobatchShape& /*shape*/, int /*tp*/) const {
    return {};
  }
  /// Whether layer_cost() follows the microbatch's tokens (a kernel model, a fit over
  /// tokens) or is fixed per microbatch (the `table` model): a CP rank's linear work is
  /// then priced at its own tokens, or as 1/cp of the microbatch's.
  virtual bool prices_tokens() const { return true; }
  /// Self-description for metrics.json (fits and their residuals for `calibrated`).
  virtual nlohmann::json describe() const { return {{"name", name()}}; }
};

/// Dissertation Eq 3.2: Bw = 0 for a frozen layer; Bd = 0 for a layer with no trainable
/// parameters at or upstream of it (p(L) of Eq 3.3, across modules). Then a measured
/// Module::backward_over_forward rescales what backward is left to R x the forward.
PassCost effective_cost(const CostModel& cost, const Model& model, int layer,
                        const MicrobatchShape& shape, int tp);

/// Memory accounting constants (bytes per parameter). Mixed precision with Adam:
/// bf16 weights (from the layer's dtype), fp32 gradients, fp32 master weights + two
/// moments = 12 bytes of optimizer state; gradients and optimizer state only for
/// trainable layers.
struct MemoryConstants {
  double gradient_bytes_per_param = 4;
  double optimizer_bytes_per_param = 12;
  /// parallel.distributed_optimizer: optimizer state sharded over the data-parallel ranks
  /// (ZeRO-1; core/memory_model.hpp).
  bool distributed_optimizer = false;
  /// parallel.fsdp: parameters and gradients sharded too (ZeRO-3; core/memory_model.hpp).
  bool shard_parameters = false;
  /// cost.fp8: bytes per linear-layer parameter of its FP8 copies (the weight and its
  /// transpose, 2), kept for the step beside the master weights; 0 without FP8.
  double fp8_weight_bytes_per_param = 0;
  /// cost.fp8_params (Megatron's fp8_param_gather, Transformer Engine's FP8 primary
  /// weights): the linear weights live in FP8 only, without their bf16 copy (the fp32
  /// master weights stay in the optimizer state), and FSDP gathers them in FP8.
  bool fp8_primary_weights = false;
  /// parallel.ep: a MoE layer's routed experts are sharded over this many ranks, and
  /// their gradient and optimizer state over the dp x cp / ep ranks holding the same ones
  /// (docs/moe.md).
  int expert_parallel = 1;
};

}  // namespace loom
