#include "core/memory_model.hpp"

namespace loom {

StaticMemory layer_state_bytes(const CostModel& cost, const Model& model, int layer, int tp,
                               const MemoryConstants& memory, int data_parallel, bool trained) {
  const LayerSpec& spec = model.layer(layer);
  const double params = cost.parameters(layer) / tp;
  StaticMemory m;
  m.parameters = params * spec.dtype_bytes;
  if (!trained || spec.frozen) return m;
  m.gradients = params * memory.gradient_bytes_per_param;
  const int shards = memory.distributed_optimizer ? data_parallel : 1;
  m.optimizer = params * memory.optimizer_bytes_per_param / shards;
  return m;
}

}  // namespace loom
