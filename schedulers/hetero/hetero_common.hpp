#pragma once
/// What the two heterogeneous schedulers share (heterogeneous-parallelism-megatron §3):
/// module groups with their own layouts, the iteration's microbatches, and the per-GPU
/// cost of a module's work on one shard of a microbatch.
///
/// Cost of a shard (one GPU of module m, layout TP/CP/DP):
///   - the replica's batch share: DP_m splits each microbatch into equal batch intervals;
///     when DP_m exceeds the samples of a microbatch (an encoder with DP 32 on 2 samples)
///     a replica processes a fraction of the samples' items (images);
///   - TP is inside the cost model (per-layer FLOPs / TP and its two activation
///     all-reduces on the intra-node links);
///   - CP splits tokens: the linear part of a layer divides by CP, its attention part
///     follows the rank's share of the attention workload from the CP planner
///     (schedulers/planners/cp/cp_plan.hpp: key blocks not fully masked, zigzag distribution as in
///     Megatron's CP); causal layers use the causal mask, bidirectional ones split evenly.
///     The K/V all-gather on the CP group is a separate collective (kv_allgather_bytes).
///   - Encoder inputs are cut into items of `item_tokens` tokens (Module::item_tokens,
///     config key `model.modules.<name>.item_tokens`, default 1024: images; seed §1: the
///     encoder sequence length is fixed by image resolution, not by the LLM context).
#include <string>
#include <vector>

#include "core/layout.hpp"
#include "core/schedule.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

/// Tokens per input item of `module`, in the module's own input tokens; 0 = one item per
/// sample. Encoders: Module::item_tokens (default kDefaultItemTokens, core/model.hpp).
/// A projector's item is its first producer's item times that producer's token_ratio
/// (rounded, at least 1), so a projector sees the same items its encoder produced. The
/// LLM: always 0 (one sequence per sample).
int item_tokens(const Model& model, int module);

/// The module groups of a per-module layout (core/layout.hpp), the LLM group last.
struct HeteroGroups {
  std::vector<LayoutGroup> groups;
  int llm = 0;                ///< index of the LLM (sink) group
  std::vector<int> encoders;  ///< the other groups, in model order
  /// Global layers of each group in model order (a group's modules may interleave with
  /// another group's in the model's topological order).
  std::vector<std::vector<int>> layers;
  /// consumers[g]: groups fed by group g.
  std::vector<std::vector<int>> consumers;
  /// True when the layouts were derived from a single-layout config's parallel.pp/dp/tp.
  bool derived = false;
};

/// Reads `problem.parallel.module_layouts`, or for a single-layout config derives them
/// with default_module_layouts (core/layout.hpp; colocated or not as `colocated_placement`).
/// Throws InputError naming the scheduler when the model has no single LLM.
HeteroGroups hetero_groups(const SchedulingProblem& problem, const std::string& scheduler,
                           bool colocated_placement);

/// The iteration's samples cut into `microbatches` global microbatches in order.
/// Throws InputError when they do not divide evenly or a microbatch cannot be split into
/// the LLM's data-parallel replicas (`llm_dp`).
std::vector<std::vector<int>> global_microbatches(const SchedulingProblem& problem, int llm_dp);

/// Sample ids of replica `replica` of `dp` in a global microbatch (whole samples only).
std::vector<int> replica_samples(const std::vector<int>& microbatch, int replica, int dp);

/// Per-GPU work of one module pass set on one shard of one microbatch.
struct ShardCost {
  std::vector<PassCost> layer;     ///< per layer of the module (frozen status applied)
  std::vector<double> activation;  ///< bytes kept per layer
  double kv_allgather_bytes = 0;   ///< per layer and pass, full buffer per CP member; 0: cp 1
};

/// The shard of module `module` (layout `layout`) on CP rank `cp_rank` for replica
/// `replica` of microbatch `microbatch` (sample ids).
ShardCost shard_cost(const SchedulingProblem& problem, int module, const ModuleLayout& layout,
                     const std::vector<int>& microbatch, int replica, int cp_rank);

/// Bytes of the boundary tensor a group hands its consumer, per sample: the output of
/// the group's last layer.
double boundary_bytes_per_sample(const SchedulingProblem& problem, int last_layer,
                                 const std::vector<int>& microbatch);

/// Parameters, gradients and optimizer state per GPU of a module stage holding `layers`:
/// parameters / TP; with parallel.distributed_optimizer the optimizer state sharded over
/// the DP x CP group (Megatron's distributed optimizer, the seed's "distributed optimizer
/// instances", Table A1; the hetero paper configs set it).
StaticMemory shard_static_memory(const SchedulingProblem& problem, const std::vector<int>& layers,
                                 const ModuleLayout& layout);

/// Appends each GPU's optimizer step (the OptimizerStep the one lowering adds in its pass
/// 7) after its gradient all-reduces: Adam over the trainable parameters whose optimizer
/// state the GPU holds (static memory: its shard under parallel.distributed_optimizer),
/// priced by the cost model; none where it prices none.
void add_optimizer_steps(const SchedulingProblem& problem, Schedule& schedule);

/// Trainable parameters among `layers`, per GPU of a TP group, in gradient bytes.
double gradient_bytes(const SchedulingProblem& problem, const std::vector<int>& layers, int tp);

/// Global layers of module `module`, in order.
std::vector<int> module_layers(const Model& model, int module);

/// Producers / consumers of a global layer along the model DAG.
std::vector<int> producer_layers(const Model& model, int layer);
std::vector<int> consumer_layers(const Model& model, int layer);

/// GPU offsets of a colocated rank set in the LLM's grid (core/layout.hpp order: replica,
/// stage, then TP x CP shard): P stages of K shards per replica, Q = P K pieces.
class ColocatedGrid {
 public:
  ColocatedGrid() = default;
  explicit ColocatedGrid(const ModuleLayout& llm)
      : shards_(llm.tp * llm.cp), pp_(llm.pp), dp_(llm.dp) {}
  int gpus() const { return shards_ * pp_ * dp_; }
  int pp() const { return pp_; }
  int shards() const { return shards_; }
  int pieces() const { return shards_ * pp_; }
  int replica(int r) const { return r / pieces(); }
  int stage(int r) const { return (r / shards_) % pp_; }
  int shard(int r) const { return r % shards_; }
  int gpu_of(int replica, int stage, int shard) const {
    return (replica * pp_ + stage) * shards_ + shard;
  }
  /// The i-th piece the LLM GPUs of shard k compute; the encoder on (stage i, shard k)
  /// computes this same piece.
  int piece_at(int shard, int i) const { return shard * pp_ + i; }

 private:
  int shards_ = 1, pp_ = 1, dp_ = 1;
};

/// Collective groups by member list (ring order as given), deduplicated.
class GroupTable {
 public:
  explicit GroupTable(Schedule* schedule) : schedule_(schedule) {}
  int id(const std::vector<int>& ranks);

 private:
  Schedule* schedule_;
};

}  // namespace loom
