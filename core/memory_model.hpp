#pragma once
/// One memory model for model state: what a GPU holds for a layer, asked by the lowering,
/// the hetero schedulers, Oobleck's profile and Entrain's layout search alike (activations
/// per microbatch come from the cost model, CostModel::activation_bytes; how many are in
/// flight is the schedule's).
#include "core/cost_model.hpp"
#include "core/model.hpp"
#include "core/schedule.hpp"

namespace loom {

/// Parameters, gradients and optimizer state one GPU holds for `parameters_per_gpu`
/// parameters: the parameters at their dtype; when trained (not frozen, not a redundant
/// copy) also gradients and optimizer state. With MemoryConstants::distributed_optimizer the
/// optimizer state is sharded over the `data_parallel` ranks holding the same parameters
/// (ZeRO stage 1: Rajbhandari et al. SC'20 §5.1, P_os = 4Ψ + 12Ψ/N_d for Adam in mixed
/// precision; Megatron-LM's --use-distributed-optimizer). With
/// MemoryConstants::shard_parameters the parameters and gradients are sharded as well
/// (ZeRO stage 3, §5.3: P_os+g+p = 16Ψ/N_d; PyTorch FSDP); the unsharded layers an
/// FSDP rank holds while it computes are the lowering's (fill_static_memory).
StaticMemory parameter_state_bytes(double parameters_per_gpu, double dtype_bytes,
                                   const MemoryConstants& memory, int data_parallel, bool trained);

/// parameter_state_bytes() of cost.parameters(layer) / tp at the layer's dtype; a frozen
/// layer is never trained. Under FP8 a transformer layer also holds the FP8 copies of its
/// linear weights (MemoryConstants::fp8_weight_bytes_per_param), in place of their bf16
/// copy with FP8 primary weights.
StaticMemory layer_state_bytes(const CostModel& cost, const Model& model, int layer, int tp,
                               const MemoryConstants& memory, int data_parallel,
                               bool trained = true);

/// Parameters of `layer` one rank holds, all TP shards together: cost.parameters(layer)
/// with its routed experts 1 / MemoryConstants::expert_parallel of theirs.
double rank_parameters(const CostModel& cost, const Model& model, int layer,
                       const MemoryConstants& memory);
/// The routed experts' part of rank_parameters(): what reduces over the expert-data-parallel
/// ranks instead of all data-parallel ones.
double rank_expert_parameters(const Model& model, int layer, const MemoryConstants& memory);

/// Bytes per parameter of layer `layer`'s linear weights (its experts' too): its dtype, or
/// one byte as FP8 primary weights of a transformer layer.
double linear_weight_bytes_per_param(const LayerSpec& layer, const MemoryConstants& memory);

/// Bytes of layer `layer`'s weights, unsharded, per GPU of a TP group of `tp`: its
/// parameters at its dtype, with FP8 primary weights (MemoryConstants::fp8_primary_weights)
/// the transformer's linear weights at 1 byte. What an FSDP gather moves.
double layer_weight_bytes(const CostModel& cost, const Model& model, int layer, int tp,
                          const MemoryConstants& memory);

/// Bytes an optimizer step moves through GPU memory to update `parameters` parameters
/// whose weights are `dtype_bytes` wide: a fused Adam reads and writes the fp32 optimizer
/// state (master weights and two moments, MemoryConstants::optimizer_bytes_per_param: 12
/// in mixed precision, ZeRO §3.1), reads the gradient and writes the weight.
double optimizer_step_bytes(double parameters, double dtype_bytes, const MemoryConstants& memory);

}  // namespace loom
