#pragma once
/// What a scheduler decides, and nothing else: the stages (which layers each holds), where
/// each stage runs, and the order of compute actions on every rank. The lowering
/// (schedulers/lowering/lowering.hpp) turns it into the Schedule IR; no scheduler writes a
/// send, a receive, a collective or a memory figure.
///
/// Glossary (Megatron's, as in docs/architecture.md):
///   stage      a contiguous piece of the model's layers, possibly spanning modules
///              (segments); with several chunks per rank it is a "virtual stage"
///   chunk      one of the stages a rank holds (Megatron's model chunk)
///   rank       one pipeline position of a data-parallel replica: a tensor-parallel group
///   microbatch the unit the pipeline moves; numbered from 0 in every replica
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "core/index.hpp"
#include "core/layout.hpp"
#include "core/schedule.hpp"
#include "schedulers/lowering/features.hpp"

namespace loom {

/// The entries of a per-layer table for layers [first, end) (a segment's, a stage
/// range's); none when end <= first, as a loop over those layers runs none.
template <class Table>
auto layer_slice(Table& per_layer, int first, int end) {
  return std::span(per_layer.begin() + first, per_layer.begin() + std::max(first, end));
}

/// One pipeline stage: the segments it owns (forward runs them in this order, backward in
/// reverse), and the forward-only copies of other layers it runs besides them
/// (features.hpp).
struct StageSpec {
  std::vector<Segment> segments = {};
  RedundantForwards forward_copies = {};
  /// Explicit placement (per-module layouts): the stage's TP width and its first GPU in
  /// each replica. 0 / empty = the single layout (parallel.tp, ranks packed in order).
  /// With `copy_ranks`: the width of the rank (a TP group, or 1 where a rank is one GPU)
  /// and the GPU of each copy in each replica, gpu[replica * copies + copy].
  int tp = 0;
  std::vector<int> gpu = {};
  /// Per-module layouts (heterogeneous-parallelism-megatron §3): the TP/CP/PP/DP grid of
  /// the stage's module group. The stage then has copies inside each replica, copy c on
  /// rank copy_ranks[c] of the replica, each computing its own batch pieces
  /// (BatchPieces, features.hpp): the module's data-parallel replicas (hetero-noncolocated,
  /// a rank is a TP group), or every GPU of its TP x CP grid (hetero-colocated, a rank is
  /// a GPU). The lowering prices a copy's work as its GPU's shard of the grid
  /// (module_shards.hpp). Every stage has a layout, or none does.
  std::optional<ModuleLayout> layout = {};
  std::vector<PipelineRank> copy_ranks = {};

  /// With `copy_ranks`: the GPU of copy `copy` in replica `replica`.
  int copy_gpu(int replica, size_t copy) const {
    return gpu[static_cast<size_t>(replica) * copy_ranks.size() + copy];
  }
};
/// Every layer in exactly one stage's `segments`.
using StageGraph = PerStage<StageSpec>;

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
  MicrobatchId microbatch{0};
};
/// orders[s]: the actions of stage s in execution order (one stage per rank).
using StageOrders = PerStage<std::vector<StageAction>>;

/// One action of a rank that may hold several stages: the stage it runs, the pass, the
/// microbatch, what it lowers to and how it joins the next action (features.hpp).
struct RankAction {
  StageId stage{};
  Pass pass = Pass::kF;
  MicrobatchId microbatch{0};
  ActionKind kind = ActionKind::kCompute;
  Join with_next = Join::kNone;
  bool operator==(const RankAction&) const = default;
};
/// orders[r]: rank r's actions in execution order.
using RankOrders = PerPipelineRank<std::vector<RankAction>>;

/// Per-module layouts number their IR microbatches by batch piece (BatchPieces, features.hpp):
/// piece `piece` of the problem's microbatch `microbatch`, `pieces` pieces per microbatch.
inline MicrobatchId batch_piece(MicrobatchId microbatch, int pieces, int piece) {
  return MicrobatchId{microbatch.value() * pieces + piece};
}
/// The problem's microbatch an IR microbatch (a batch piece) belongs to.
inline MicrobatchId whole_microbatch(MicrobatchId piece, int pieces) {
  return MicrobatchId{piece.value() / pieces};
}

/// A scheduler's whole decision.
struct PipelinePrograms {
  StageGraph stages;
  /// Ranks per data-parallel replica.
  int ranks = 1;
  /// stage -> rank inside the replica. Empty: stage s on rank s mod `ranks` (Megatron's
  /// interleaved placement; one stage per rank when there are `ranks` stages).
  PerStage<PipelineRank> stage_rank;
  /// Per replica, every rank's order. One entry: the same order in every replica.
  std::vector<RankOrders> replicas;
  /// Bidirectional pipelines: the second placement of every stage (features.hpp). None:
  /// one pipeline.
  std::optional<SecondPipeline> up = {};
  /// Per-module layouts: each microbatch's batch pieces (features.hpp).
  BatchPieces batch = {};

  /// Whether the stages carry per-module layouts (every stage does, or none).
  bool sharded() const { return !stages.empty() && stages.front().layout.has_value(); }
  IdRange<PipelineRank> rank_ids() const { return IdRange<PipelineRank>(ranks); }
  bool has_rank(PipelineRank rank) const { return rank.value() >= 0 && rank.value() < ranks; }
  /// The rank of the down placement (every microbatch's, with one pipeline); a sharded
  /// stage's first copy.
  PipelineRank rank_of(StageId stage) const {
    const StageSpec& spec = stages[stage];
    if (!spec.copy_ranks.empty()) return spec.copy_ranks.front();
    return stage_rank.empty() ? PipelineRank{stage.value() % ranks} : stage_rank[stage];
  }
  /// The copy of a stage with `copy_ranks` that computes `microbatch`: copy c of C takes
  /// pieces [c K/C, (c+1) K/C).
  size_t copy_of(StageId stage, MicrobatchId microbatch) const {
    const int per_copy = batch.pieces / isize(stages[stage].copy_ranks);
    return static_cast<size_t>(microbatch.value() % batch.pieces / per_copy);
  }
  /// The rank that runs `stage` for `microbatch`.
  PipelineRank rank_of(StageId stage, MicrobatchId microbatch) const {
    const std::vector<PipelineRank>& copies = stages[stage].copy_ranks;
    if (!copies.empty()) return copies[copy_of(stage, microbatch)];
    return !up || microbatch < up->first_microbatch ? rank_of(stage) : up->stage_rank[stage];
  }
  bool holds(PipelineRank rank, StageId stage) const {
    const std::vector<PipelineRank>& copies = stages[stage].copy_ranks;
    return rank_of(stage) == rank ||
           std::find(copies.begin(), copies.end(), rank) != copies.end() ||
           (up && up->stage_rank[stage] == rank);
  }
  const RankOrders& orders(int replica) const {
    return replicas.size() == 1 ? replicas.front() : replicas[static_cast<size_t>(replica)];
  }
};

/// One stage per rank (rank s runs stage s): the orders as rank actions.
PipelinePrograms one_stage_per_rank(StageGraph stages, const StageOrders& orders);

}  // namespace loom
