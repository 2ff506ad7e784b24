#pragma once
/// Costs under per-module layouts (heterogeneous-parallelism-megatron §3): the work of one
/// GPU of a module's own TP x CP x DP grid on one microbatch. The
/// lowering prices stages that carry a layout (StageSpec::layout) with them.
///
/// Cost of a shard (one GPU of module m, layout TP/CP/DP):
///   - the replica's batch share: DP_m splits each microbatch into equal batch intervals;
///     when DP_m exceeds the samples of a microbatch (an encoder with DP 32 on 2 samples)
///     a replica processes a fraction of the samples' items (images);
///   - TP is inside the cost model (per-layer FLOPs / TP and its two activation
///     all-reduces on the intra-node links);
///   - CP splits tokens: the linear part of a layer divides by CP, its attention part
///     follows the rank's share of the attention workload from the CP planner
///     (schedulers/planners/cp/cp_plan.hpp: key blocks not fully masked, zigzag distribution
///     as in Megatron's CP); causal layers use the causal mask, bidirectional ones split
///     evenly. The K/V all-gather on the CP group is a separate collective
///     (kv_allgather_bytes).
///   - Encoder inputs are items (images, tiles; core/workload.hpp's attention_items(), as
///     under every scheduler): the workload's own, else cut into `item_tokens` tokens
///     (config key `model.modules.<name>.item_tokens`, default 1024; seed §1: the encoder
///     sequence length is fixed by image resolution, not by the LLM context).
#include <vector>

#include "core/index.hpp"
#include "core/layout.hpp"
#include "core/schedule.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

/// Global layers of module `module`, in order.
std::vector<int> module_layers(const Model& model, ModuleId module);

/// The iteration's samples cut into schedule.microbatches global microbatches in order.
/// Throws InputError when they do not divide evenly or a microbatch cannot be split into
/// the LLM's data-parallel replicas (`llm_dp`).
PerMicrobatch<std::vector<SampleId>> global_microbatches(const SchedulingProblem& problem,
                                                         int llm_dp);

/// Sample ids of replica `replica` of `dp` in a global microbatch (whole samples only).
std::vector<SampleId> replica_samples(const std::vector<SampleId>& microbatch, int replica, int dp);

/// Per-GPU work of one module pass set on one shard of one microbatch.
struct ShardCost {
  std::vector<PassCost> layer;     ///< per layer of the module (frozen status applied)
  std::vector<double> activation;  ///< bytes kept per layer
  double kv_allgather_bytes = 0;   ///< per layer and pass, full buffer per CP member; 0: cp 1
};

/// The shard of module `module` (layout `layout`) on CP rank `cp_rank` for replica
/// `replica` of microbatch `microbatch` (sample ids). With cp_mode = "replicate" every CP
/// rank's shard is the whole replica's (no split, no K/V all-gather).
ShardCost shard_cost(const SchedulingProblem& problem, ModuleId module, const ModuleLayout& layout,
                     const std::vector<SampleId>& microbatch, int replica, int cp_rank);

/// Where a GPU sits in a module's grid (core/layout.hpp order: replica, stage, then the
/// TP x CP group, TP fastest).
struct GridPosition {
  int replica = 0;
  int stage = 0;
  int cp_rank = 0;
  int tp_rank = 0;
};
GridPosition grid_position(const ModuleLayout& layout, int gpu);
/// The GPUs of `gpu`'s context-parallel ring: its replica, stage and TP rank, every CP rank.
std::vector<int> cp_ring(const ModuleLayout& layout, int gpu);

/// Bytes of the boundary tensor a module hands its consumer, per sample: the output of
/// its last layer `last_layer`, averaged over the samples `microbatch`.
double boundary_bytes_per_sample(const SchedulingProblem& problem, int last_layer,
                                 const std::vector<SampleId>& microbatch);

}  // namespace loom
