#pragma once
/// Lowering features: what a scheduler may ask of the lowering beyond its stages, their
/// ranks and the order of actions. Each is a named value on PipelinePrograms, StageSpec or
/// RankAction (programs.hpp), none belongs to one scheduler, and they compose: any
/// scheduler may request any of them, and the lowering checks the few pairs that cannot go
/// together (Context::check_features). Each has its own test on a hand-written program in
/// tests/schedulers/lowering/features_test.cpp.
///
///   feature                  requested by                  used by
///   Join::kOverlap           RankAction::with_next         dualpipe-v, PyTorch CSV import
///   Join::kUnit              RankAction::with_next         hetero-colocated
///   ActionKind::kBoundary    RankAction::kind              hetero-colocated
///   SecondPipeline           PipelinePrograms::up          chimera
///   BatchPieces              PipelinePrograms::batch       hetero-noncolocated, -colocated
///   RedundantForwards        StageSpec::forward_copies     encoders-replicated, bamboo
/// Per-module layouts (StageSpec::layout, copy_ranks, gpu, tp) are the one feature that
/// changes what a rank is; programs.hpp describes them with the stage.
#include <cstdint>
#include <vector>

#include "core/index.hpp"

namespace loom {

/// A rank inside one data-parallel replica: PipelinePrograms numbers every replica's
/// ranks from 0, and the lowering maps (replica, PipelineRank) to the Schedule's RankId
/// (lowering::Context::global_rank), so the two numberings cannot be mixed up.
LOOM_DECLARE_ID(PipelineRank, PerPipelineRank);

/// Global layers [first, end) of one module.
struct Segment {
  ModuleId module{0};
  int first = 0;
  int end = 0;
};

/// How a rank action runs with the next action of its rank's order.
enum class Join : uint8_t {
  /// On its own: its receives right before its computes, its sends right after.
  kNone,
  /// An overlapped forward-backward pair (DualPipe's F&B chunk, DeepSeek-V3 §3.2.1;
  /// PyTorch's OVERLAP_F_B): this F and the next action, a full backward (B) of another
  /// microbatch, run as one fused action. They lower to adjacent Computes flagged
  /// `overlapped` (core/schedule.hpp), the pair's receives before the F and its sends after
  /// the B, so each half's messages hide behind the other's compute.
  kOverlap,
  /// One unit: every receive of this action and the next before the first compute, every
  /// send after the last (a stage that moves a microbatch's batch pieces together, as
  /// Megatron moves whole microbatches). Chains: a unit runs until an action of kNone.
  kUnit,
};

/// What a rank action lowers to.
enum class ActionKind : uint8_t {
  /// The stage's computes of the pass (F, B, I or W) for the microbatch.
  kCompute,
  /// Per-module layouts only (hetero-colocated, §3.2-3.3): the colocated boundary
  /// transform of the stage's output into its consumer's layout, its all-gathers and no
  /// compute (lowering/boundary.hpp). With a one-stage consumer, for the whole iteration:
  /// the forward leg (pass F) after the stage's forwards, the backward leg (pass B) before
  /// its backwards. With a pipelined consumer, the gather of one microbatch's shard on the
  /// consumer's first stage, in the unit of that microbatch's forward.
  kBoundary,
};

/// A second pipeline in the same replica (bidirectional pipelines: Chimera, Li and
/// Hoefler SC'21): a copy of every stage, stage s of the "up" pipeline on
/// stage_rank[s]. Microbatches >= first_microbatch run on it, the others on the "down"
/// placement (PipelinePrograms::stage_rank). Every stage's weights then live on two ranks
/// of each replica, and the gradient all-reduce sums both copies (and the data-parallel
/// replicas). A rank must hold the same stages as each rank its stages' copies live on.
struct SecondPipeline {
  PerStage<PipelineRank> stage_rank = {};
  MicrobatchId first_microbatch{0};
};

/// Batch pieces (per-module layouts, heterogeneous-parallelism-megatron §3.1): each
/// microbatch of the problem is `pieces` IR microbatches per IR replica. Copy c of a stage
/// with C copies (StageSpec::copy_ranks) computes pieces [c K/C, (c+1) K/C) of every
/// microbatch, K = pieces, at C / K of its shard's work: a module replica works its share
/// of the batch piece by piece, and a boundary between modules of different DP sends one
/// message per piece (the leader routes of §3.1). hetero-noncolocated: K = the largest
/// module DP, one IR replica; hetero-colocated: K = the GPUs of an LLM replica, one IR
/// replica per LLM replica (`module_replicas`).
struct BatchPieces {
  int pieces = 1;
  int module_replicas = 1;
};

/// Forward-only copies of other stages' layers a stage runs besides its own segments.
/// Redundant computes feed nothing and cover no sample (Compute::redundant).
struct RedundantForwards {
  /// Run before the stage's own forward; the copy holds weights only
  /// (encoders-replicated: every encoder on every stage, cornstarch-arxiv §2.2 Fig 1b).
  std::vector<Segment> before = {};
  /// Run after the stage's own forward, on its own output: a copy of the successor stage
  /// holding its whole model state (weights, gradients, optimizer), so the stage can take
  /// over its training when the successor's node is preempted (Bamboo's forward
  /// redundant computation, NSDI'23; dissertation §2.2).
  std::vector<Segment> successor = {};
};

}  // namespace loom
