#pragma once
/// The one lowering: a scheduler's PipelinePrograms (stages, placement, per-rank action
/// orders) become the Schedule IR. Every scheduler goes through it; it is a
/// short sequence of named passes (lowering/passes.hpp), each testable alone:
///   1. place_ranks            replica d, rank r -> GPUs (packed, or the stages' explicit
///                             placement for per-module layouts)
///   2. assign_samples         samples -> (replica, microbatch): in order, or the
///                             scheduler's own batching (SchedulingProblem::assignment), or
///                             batch pieces (per-module data parallelism, programs.hpp)
///   3. cost_microbatches      every layer for every microbatch (frozen status applied,
///                             Eq 3.2; or the frozen-unaware `naive` view a planner
///                             believes; shards of a module's grid, module_shards.hpp)
///   4. expand_actions         each action -> one Compute per segment of its stage, plus
///                             forward-only redundant copies (encoders-replicated before
///                             the forward, Bamboo's successor copy after it); per-module
///                             layouts: one per layer with the CP K/V all-gathers, and the
///                             colocated boundary all-gathers of `boundary` actions
///   5. add_point_to_point     Recv before / Send after each compute whose data edge
///                             (core/dataflow.hpp) crosses ranks; a receiver takes an edge's
///                             messages in the order the sender sent them; a boundary from
///                             another module group adds the leader's TP broadcast
///   5b. add_parameter_gathers parallel.fsdp: the per-layer parameter all-gathers over the
///                             replicas, issued one layer ahead, and the gradient
///                             reduce-scatters after each layer's last backward
///                             (lowering/pass_fsdp.cpp)
///   6. add_gradient_allreduce the data-parallel all-reduce of each rank's trainable
///                             parameters (all its chunks in one bucket; per-module
///                             layouts: over each stage's copies), then the tied
///                             embedding's all-reduce between first and last stage
///                             (lowering/tied_embedding.hpp); with
///                             parallel.overlap_grad_reduce, async buckets overlapped
///                             with the backward instead (lowering/gradient_buckets.hpp)
///   7. add_optimizer_step     each rank's Adam step over the trainable parameters it
///                             updates (its shard with ZeRO-1), memory-bound, priced by
///                             the cost model (none under `table` costs)
///   8. fill_static_memory     parameters, gradients and optimizer state per rank, with
///                             the LM head's copy of a tied embedding
#include <vector>

#include "core/schedule.hpp"
#include "schedulers/lowering/programs.hpp"
#include "schedulers/lowering/stage_graph.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

/// Which costs the lowered ops carry: the real frozen-aware ones, or what a frozen-unaware
/// planner believes (every layer trainable, backward = 2 x forward) for its predictions.
enum class LoweringCosts { kTrue, kNaive };

/// Lowers a scheduler's decision. Throws InputError when the programs name a stage of
/// another rank or a microbatch out of range, or a compute needs a message its producer
/// never sends (a hand-written or imported schedule); InfeasibleError when the layout
/// needs more GPUs than the cluster has.
Schedule lower(const SchedulingProblem& problem, const char* scheduler_name,
               const PipelinePrograms& programs, LoweringCosts costs = LoweringCosts::kTrue);

/// One stage per rank, the same orders in every replica.
Schedule lower_stage_graph(const SchedulingProblem& problem, const char* scheduler_name,
                           const StageGraph& graph, const StageOrders& orders,
                           LoweringCosts costs = LoweringCosts::kTrue);

/// Virtual stages (Megatron interleaved, v chunks per rank): `graph` has p x v stages for
/// the p = orders.size() ranks of a replica; stage s lives on rank s mod p as its chunk
/// s div p. Schedule::num_stages is p, the pipeline depth.
Schedule lower_virtual_stages(const SchedulingProblem& problem, const char* scheduler_name,
                              const StageGraph& graph, const RankOrders& orders,
                              LoweringCosts costs = LoweringCosts::kTrue);

/// The single-layout chain (plan_stages + chain_stages) cut into `stages` stages (0 =
/// parallel.pp, one per rank). Rejects per-module layouts (parallel.modules) with
/// InputError.
StageGraph pipeline_stage_graph(const SchedulingProblem& problem, const char* scheduler_name,
                                int stages = 0);

/// pipeline_stage_graph() lowered with `orders`.
Schedule lower_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                        const StageOrders& orders);

/// The single-layout chain cut into parallel.pp x `chunks` virtual stages, lowered with
/// orders for parallel.pp ranks. Rejects per-module layouts like lower_pipeline().
Schedule lower_virtual_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                                const RankOrders& orders, int chunks);

/// Parameters, gradients and optimizer state of every rank of one replica under the
/// programs' placement (pass 7; planners that search under a memory cap ask it first).
PerPipelineRank<StaticMemory> static_memory_per_rank(const SchedulingProblem& problem,
                                                     const PipelinePrograms& programs);

}  // namespace loom
