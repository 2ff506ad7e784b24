#pragma once
/// Lowering of a stage graph plus a per-stage action order into a full Schedule, shared by
/// every pipeline scheduler: linear ones (GPipe, 1F1B) and the multimodal ones
/// (encoders-replicated, encoders-colocated, cornstarch). Schedulers decide which layers
/// each stage runs and the order of (pass, microbatch) on each stage; this pass does the
/// rest, in one place:
///   1. place ranks: replica d, stage s -> rank d*S + s on GPUs [rank*tp, rank*tp + tp),
///      or where the stage's explicit placement says (per-module layouts)
///   2. assign samples to (replica, microbatch) in order
///   3. cost every layer for every microbatch (frozen status applied, Eq 3.2; or the
///      frozen-unaware `naive` view a planner believes, for predictions)
///   4. expand each action into one Compute per segment of the stage (a stage may hold
///      segments of several modules: a fused encoders-colocated stage runs them in order)
///      plus forward-only redundant copies (encoders-replicated)
///   5. add Recv before and Send after each compute whose producer or consumer layer lives
///      on another stage: messages follow the module DAG (an encoder's last stage sends to
///      the stage holding the LLM's first layer; the LLM fans in from every encoder)
///   6. add the data-parallel gradient all-reduce of each stage's trainable parameters
///   7. fill static memory (parameters, gradients, optimizer state)
#include <vector>

#include "core/schedule.hpp"
#include "schedulers/partition.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

/// One pass of one microbatch on a stage. Backward is either one fused `kB`, or split
/// (zero-bubble; Entrain's split backward) into `kI` then `kW`, which a scheduler places
/// independently, e.g. every I before any W, or a W deferred past later microbatches:
///   kB  receives the output gradients, computes input + weight gradients, sends the input
///       gradients upstream, frees the forward's activations
///   kI  receives the output gradients, computes input gradients (Bd), sends them upstream;
///       the activations stay alive (W still needs them)
///   kW  computes weight gradients (Bw) only, no messages, frees the activations; it may
///       run any time after the I of the same (stage, microbatch)
/// On a stage of several segments (modules), I and W each cover all its segments.
struct StageAction {
  Pass pass = Pass::kF;
  int microbatch = 0;
};
/// orders[s]: the actions of stage s in execution order (the same in every replica).
using StageOrders = std::vector<std::vector<StageAction>>;

/// One action of a rank that holds several virtual stages (Megatron's interleaved
/// schedule): the virtual stage it runs, then the pass and microbatch as in StageAction.
struct RankAction {
  int stage = 0;  ///< virtual stage index (the IR's Compute::stage)
  Pass pass = Pass::kF;
  int microbatch = 0;
};
/// orders[r]: rank r's actions in execution order (the same in every replica).
using RankOrders = std::vector<std::vector<RankAction>>;

/// Global layers [first, end) of one module.
struct Segment {
  int module = 0;
  int first = 0;
  int end = 0;
};

/// One pipeline stage: the segments it owns (forward runs them in this order, backward in
/// reverse) and forward-only redundant copies it runs before them.
struct StageSpec {
  std::vector<Segment> segments;
  std::vector<Segment> redundant;
  /// Explicit placement (per-module layouts): the stage's TP width and its first GPU in
  /// each replica. 0 / empty = the single layout (parallel.tp, ranks packed in order).
  int tp = 0;
  std::vector<int> gpu;
};
/// Every layer in exactly one stage's `segments`; stage s of every replica is one rank.
using StageGraph = std::vector<StageSpec>;

/// The stage partition the problem asks for (explicit or Eq 3.5 with its cost view).
std::vector<StageRange> plan_stages(const SchedulingProblem& problem);
/// The same into `stages` stages (parallel.pp x chunks for virtual stages); the explicit
/// schedule.stage_layers must then list `stages` entries.
std::vector<StageRange> plan_stages(const SchedulingProblem& problem, int stages);

/// Contiguous global-layer ranges as stages, cut into segments at module boundaries.
StageGraph chain_stages(const Model& model, const std::vector<StageRange>& ranges);

/// Producers / consumers of a layer along the model DAG: the previous / next layer of its
/// module, or the modules joined by edges.
std::vector<int> layer_producers(const Model& model, int layer);
std::vector<int> layer_consumers(const Model& model, int layer);

/// For each stage, the most stages on any path from it to a sink of the stage graph
/// (0 for the last LLM stage): stage s of a chain of p has p - s - 1.
std::vector<int> stages_downstream(const Model& model, const StageGraph& graph);

/// 1F1B on a stage graph: stage s warms up with min(warmup[s], m) forwards, then
/// alternates one forward and one backward, then drains. With warmup = p - s - 1 this is
/// the linear 1F1B (dissertation §4.2.1); with stages_downstream() it is the
/// cross-modality 1F1B of cornstarch-arxiv §4.1 Fig 6.
StageOrders one_f_one_b_orders(const std::vector<int>& warmup, int microbatches);

/// Which costs the lowered ops carry: the real frozen-aware ones, or what a frozen-unaware
/// planner believes (every layer trainable, backward = 2 x forward) for its predictions.
enum class LoweringCosts { kTrue, kNaive };

Schedule lower_stage_graph(const SchedulingProblem& problem, const char* scheduler_name,
                           const StageGraph& graph, const StageOrders& orders,
                           LoweringCosts costs = LoweringCosts::kTrue);

/// Virtual stages (Megatron interleaved, v chunks per rank): `graph` has p x v stages for
/// the p = orders.size() ranks of a replica; virtual stage s lives on rank s mod p as its
/// chunk s div p, so chunk c of rank r is virtual stage c p + r. Ops carry the virtual
/// stage; messages flow only between distinct ranks (p = 1 keeps them local); each rank
/// holds the static memory of all its chunks and all-reduces their gradients once
/// (labelled with its chunk-0 stage); Schedule::num_stages is p, the pipeline depth.
/// lower_stage_graph() is the case v = 1 (orders[s] all on stage s), byte for byte.
Schedule lower_virtual_stages(const SchedulingProblem& problem, const char* scheduler_name,
                              const StageGraph& graph, const RankOrders& orders,
                              LoweringCosts costs = LoweringCosts::kTrue);

/// The single-layout chain cut into parallel.pp x `chunks` virtual stages (Eq 3.5 or
/// schedule.stage_layers), lowered by lower_virtual_stages() with orders for parallel.pp
/// ranks. Rejects per-module layouts like lower_pipeline().
Schedule lower_virtual_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                                const RankOrders& orders, int chunks);

/// Throws InputError when the config has per-module layouts (parallel.modules): every
/// scheduler but the per-module ones (hetero-*) runs the single parallel.pp/dp/tp layout.
void require_single_layout(const SchedulingProblem& problem, const char* scheduler_name);

/// The single-layout chain: plan_stages() + chain_stages() + lower_stage_graph(). Rejects
/// per-module layouts (parallel.modules) and schedule.chunks != 1 with InputError.
Schedule lower_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                        const StageOrders& orders);

}  // namespace loom
