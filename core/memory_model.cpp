#include "core/memory_model.hpp"

#include <algorithm>

namespace loom {

StaticMemory parameter_state_bytes(double parameters_per_gpu, double dtype_bytes,
                                   const MemoryConstants& memory, int data_parallel, bool trained) {
  StaticMemory m;
  // ZeRO-3 (FSDP) shards all three; ZeRO-1 (distributed optimizer) the optimizer state.
  const int state_shards = memory.shard_parameters ? data_parallel : 1;
  m.parameters = parameters_per_gpu * dtype_bytes / state_shards;
  if (!trained) return m;
  m.gradients = parameters_per_gpu * memory.gradient_bytes_per_param / state_shards;
  const int shards = memory.distributed_optimizer || memory.shard_parameters ? data_parallel : 1;
  m.optimizer = parameters_per_gpu * memory.optimizer_bytes_per_param / shards;
  return m;
}

double optimizer_step_bytes(double parameters, double dtype_bytes, const MemoryConstants& memory) {
  return parameters *
         (2 * memory.optimizer_bytes_per_param + memory.gradient_bytes_per_param + dtype_bytes);
}

double rank_expert_parameters(const Model& model, int layer, const MemoryConstants& memory) {
  return expert_parameters(model.layer(layer)) / memory.expert_parallel;
}

double rank_parameters(const CostModel& cost, const Model& model, int layer,
                       const MemoryConstants& memory) {
  const LayerSpec& spec = model.layer(layer);
  return cost.parameters(layer) - layer_parameters(spec) +
         rank_layer_parameters(spec, memory.expert_parallel);
}

StaticMemory layer_state_bytes(const CostModel& cost, const Model& model, int layer, int tp,
                               const MemoryConstants& memory, int data_parallel, bool trained) {
  const LayerSpec& spec = model.layer(layer);
  const bool train = trained && !spec.frozen;
  // Routed experts: 1/ep of them per rank, their state sharded over the dp / ep ranks
  // holding the same experts (Megatron-Core's expert-data-parallel group).
  const double experts = rank_expert_parameters(model, layer, memory);
  const int expert_dp = std::max(1, data_parallel / memory.expert_parallel);
  StaticMemory m =
      parameter_state_bytes((rank_parameters(cost, model, layer, memory) - experts) / tp,
                            spec.dtype_bytes, memory, data_parallel, train);
  if (experts > 0)
    m += parameter_state_bytes(experts / tp, spec.dtype_bytes, memory, expert_dp, train);
  if (spec.kind == LayerKind::kTransformer && memory.fp8_weight_bytes_per_param > 0) {
    // The FP8 copies of a transformer layer's linear weights, sharded like the weights
    // (the experts over their own holders); as primary weights they replace the bf16 ones.
    const double dense = rank_layer_parameters(spec, memory.expert_parallel) - experts;
    const double linear = memory.shard_parameters
                              ? (dense / data_parallel + experts / expert_dp) / tp
                              : (dense + experts) / tp;
    m.parameters += linear * memory.fp8_weight_bytes_per_param;
    if (memory.fp8_primary_weights) m.parameters -= linear * spec.dtype_bytes;
  }
  return m;
}

double linear_weight_bytes_per_param(const LayerSpec& layer, const MemoryConstants& memory) {
  return memory.fp8_primary_weights && layer.kind == LayerKind::kTransformer ? 1.0
                                                                             : layer.dtype_bytes;
}

double layer_weight_bytes(const CostModel& cost, const Model& model, int layer, int tp,
                          const MemoryConstants& memory) {
  const LayerSpec& spec = model.layer(layer);
  double bytes = rank_parameters(cost, model, layer, memory) / tp * spec.dtype_bytes;
  if (const double linear = linear_weight_bytes_per_param(spec, memory); linear != spec.dtype_bytes)
    bytes -= rank_layer_parameters(spec, memory.expert_parallel) / tp * (spec.dtype_bytes - linear);
  return bytes;
}

}  // namespace loom
