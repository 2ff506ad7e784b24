#pragma once
/// DIP-like dynamic interleaved pipeline (baseline-schedules.md §5, DIP ASPLOS'26;
/// dissertation §4.2.1 Fig 4.2c, §4.7.2). Modalities are partitioned separately and
/// colocated on the same P ranks; per iteration a search orders their segments and a
/// greedy dual-queue list scheduler interleaves them under a memory cap.
#include <cstdint>
#include <vector>

#include "core/index.hpp"
#include "schedulers/lowering/programs.hpp"
#include "schedulers/variability/disttrain.hpp"

namespace loom {

/// One model chunk: a piece of one modality's layers on one rank of the replica. Chunk x is
/// stage x of the lowered programs, so chunks are numbered by StageId.
struct DipChunk {
  int modality = 0;      ///< index into DipLayout::modality_names order (encoders, then LLM)
  PipelineRank rank{0};  ///< rank inside the replica (chunk c of a modality: c mod P)
  std::vector<Segment> segments;
  std::vector<StageId> producers;  ///< chunks whose forward output this chunk's forward needs
  std::vector<StageId> gradients;  ///< chunks whose input gradients this chunk's backward needs
};

/// Separated partitioning: modality i gets K_i = floor(T_i / T_1) segments per rank
/// (T sorted ascending, one-microbatch profile), its layers cut into P x K_i chunks by
/// Eq 3.5, chunk c on rank c mod P.
struct DipLayout {
  int ranks = 1;       ///< P
  std::vector<int> k;  ///< K_i per modality
  PerStage<DipChunk> chunks;
};
DipLayout dip_layout(const SchedulingProblem& problem);

/// A task's position in its replica's task list.
using DipTaskId = Id<struct DipTaskTag>;

/// One F or B of one chunk for one microbatch of one replica: a node of the search's DAG.
struct DipTask {
  StageId chunk{0};
  MicrobatchId microbatch{0};
  bool forward = true;
  double seconds = 0;
  double activation_bytes = 0;  ///< held from the F's start to the B's end
  std::vector<DipTaskId> deps;  ///< tasks that must finish first
};
using DipTasks = IdVector<DipTaskId, DipTask>;

/// A (microbatch, modality) unit of the search's order: microbatch * modalities + modality.
LOOM_DECLARE_ID(DipUnit, PerDipUnit);

/// The greedy's priority of every task (lower first): its (microbatch, modality) unit's
/// position in a search order, `unit_position[DipUnit{microbatch * modalities + modality}]`,
/// with the chunk breaking ties inside a unit.
IdVector<DipTaskId, double> dip_priorities(const DipTasks& tasks, const DipLayout& layout,
                                           const PerDipUnit<double>& unit_position);

/// Greedy dual-queue interleaving (DIP §schedule search step 2): repeatedly take the rank
/// whose next task can start earliest; a rank with both a forward and a backward ready
/// alternates them as 1F1B does; a forward that would push the rank past `cap_bytes`
/// (static + live activations) waits. `priority[t]` ranks tasks inside a queue (lower
/// first). Returns per-rank task order and the makespan; throws InfeasibleError when the
/// cap admits no order.
struct DipOrder {
  PerPipelineRank<std::vector<DipTaskId>> per_rank;
  double makespan_s = 0;
  double peak_bytes = 0;  ///< the largest static + live activation bytes on any rank
};
DipOrder dip_greedy(const DipTasks& tasks, const PerStage<DipChunk>& chunks, int ranks,
                    const PerPipelineRank<double>& static_bytes, double cap_bytes,
                    const IdVector<DipTaskId, double>& priority);

/// MCTS over the order of (microbatch, modality) units (priority = position, DIP's
/// "n - i"): UCB s^alpha + beta sqrt(ln N_parent / N_child), 10 random rollouts per
/// expansion, each scored by dip_greedy. Stops after `iterations` or `budget_s` seconds,
/// whichever comes first (an iteration is not started when the slowest one so far would
/// overrun the time budget); deterministic for a seed when the time budget does not bind.
struct DipSearchStats {
  int iterations = 0;
  int rollouts = 0;
  double seconds = 0;
  /// The root order: every encoder unit before the LLM (Fig 4.2c), or microbatch-major
  /// when that cannot run under the memory cap.
  double initial_makespan_s = 0;
  double best_makespan_s = 0;
};
PerDipUnit<double> dip_search(const std::vector<DipTasks>& replicas, const DipLayout& layout,
                              int microbatches, int modalities,
                              const PerPipelineRank<double>& static_bytes, double cap_bytes,
                              int iterations, double budget_s, std::uint64_t seed,
                              DipSearchStats* stats);

/// The dip schedule and what its search did.
Schedule dip_schedule(const SchedulingProblem& problem, DipSearchStats* stats);

/// dip's options (`[schedule.dip]`; docs/baselines-disttrain-dip-omnibal.md).
struct DipOptions {
  int seed = 0;                ///< MCTS rollouts' seed
  int search_iterations = 50;  ///< MCTS iterations (deterministic for a seed); 0: the root order
  /// Wall-clock cap on the search, s; generous so that the iteration budget binds and
  /// outputs stay byte-identical (a binding time cap is machine-dependent).
  double search_budget_s = 30;
  double memory_cap_gb = 0;  ///< per-rank memory cap, GB; 0 = the GPU's memory
};
const OptionSet<DipOptions>& dip_options();

}  // namespace loom
