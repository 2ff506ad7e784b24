#pragma once
/// One memory model for model state: what a GPU holds for a layer, asked by the lowering,
/// the hetero schedulers, Oobleck's profile and Entrain's layout search alike (activations
/// per microbatch come from the cost model, CostModel::activation_bytes; how many are in
/// flight is the schedule's).
#include "core/cost_model.hpp"
#include "core/model.hpp"
#include "core/schedule.hpp"

namespace loom {

/// Parameters, gradients and optimizer state one GPU holds for `layer` split `tp` ways:
/// parameters at the layer's dtype; for a trained (not frozen, not a redundant copy) layer
/// also gradients and optimizer state. With MemoryConstants::distributed_optimizer the
/// optimizer state is sharded over the `data_parallel` ranks holding the same parameters
/// (ZeRO stage 1: Rajbhandari et al. SC'20 §5.1, P_os = 4Ψ + 12Ψ/N_d for Adam in mixed
/// precision; Megatron-LM's --use-distributed-optimizer).
StaticMemory layer_state_bytes(const CostModel& cost, const Model& model, int layer, int tp,
                               const MemoryConstants& memory, int data_parallel,
                               bool trained = true);

}  // namespace loom
