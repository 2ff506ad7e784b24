#pragma once
/// Execution orders of the two heterogeneous schedules
/// (heterogeneous-parallelism-megatron §3.3 and App. D): graph-aware 1F1B (non-colocated),
/// the three phases (colocated) and Megatron-LM's single-grid per-microbatch order (the
/// homogeneous baseline, at the end of this file).
///
/// Non-colocated, graph-aware 1F1B (§3.3, Fig 4a, Fig 14): the module graph is expanded
/// into pipeline-stage nodes (module u's stage p feeds its stage p+1; u's last stage feeds
/// the first stage of every consumer v). A node's warmup is its distance to the sink
/// (the number of stage nodes downstream on the longest path) where a linear 1F1B uses
/// p - s - 1; then one forward, one backward; then the drain.
///
///     Fig 4a: E1P0 -> E1P1 --+
///                     E2P0 --+-> L0 -> L1 -> L2        warmup: E1P0 4, E1P1 3, E2P0 3,
///                                                               L0 2, L1 1, L2 0
///
/// Colocated, three phases (§3.3, Fig 4b, App. D), on every GPU of the shared rank set:
///   phase 1  encoder forward over all local microbatches, then the colocated forward
///            transform into the LLM layout
///   phase 2  the LLM's ordinary 1F1B on the detached boundary tensor (no encoder
///            collective inside the staggered LLM pipeline)
///   phase 3  boundary-gradient handoff (colocated backward transform), then encoder
///            backward over the saved activations
#include <vector>

#include "schedulers/lowering/lowering.hpp"

namespace loom {

/// A module group's pipeline in the stage graph: its stage count and the groups it feeds.
struct StageGraphGroup {
  int pp = 1;
  std::vector<int> consumers;  ///< indices of the groups this one feeds (empty: the sink)
};

/// Distance to the sink of every stage node: result[g][p] for group g, stage p.
/// Throws std::logic_error on a cycle (the model DAG forbids one).
std::vector<std::vector<int>> stages_to_sink(const std::vector<StageGraphGroup>& groups);

/// 1F1B for one stage node with `downstream` stage nodes to the sink: min(downstream, m)
/// warmup forwards, then forward/backward pairs, then the remaining backwards.
std::vector<StageAction> one_f_one_b_order(int downstream, int microbatches);

/// Graph-aware 1F1B: the action order of every stage node, orders[g][p].
std::vector<StageOrders> graph_aware_1f1b(const std::vector<StageGraphGroup>& groups,
                                          int microbatches);

enum class Phase { kEncoderForward = 1, kLlm = 2, kEncoderBackward = 3 };

/// One step of a colocated GPU's program: a compute action of a module group, or the
/// boundary transform of an encoder group (forward in phase 1, backward in phase 3).
struct PhaseStep {
  Phase phase = Phase::kEncoderForward;
  int group = 0;  ///< module group (index into the groups the caller passed)
  bool boundary = false;
  StageAction action;  ///< for compute steps
};

/// The three-phase order: `encoders` (group indices, topological order), `llm` the LLM
/// group, `llm_order` its 1F1B actions. Encoder forwards run per encoder over all
/// microbatches; their backwards in reverse encoder order after the LLM drains.
std::vector<PhaseStep> three_phase_order(const std::vector<int>& encoders, int llm,
                                         const std::vector<StageAction>& llm_order,
                                         int microbatches);

/// Megatron-LM's single-grid order (the homogeneous baseline H): each LLM action of
/// `llm_order` with its encoders around it, so a microbatch's encoder forward runs right
/// before its LLM forward and its encoder backward right after its LLM backward, as
/// Megatron-LM's LLaVA model calls its vision model inside each microbatch's forward
/// (megatron/core/models/multimodal/llava_model.py). Only one microbatch's encoder
/// activations are live at a time (with an LLM of one stage). No boundary steps: the
/// caller keeps the encoders' batch shards on the LLM's (equal DP, rank-local).
std::vector<PhaseStep> per_microbatch_order(const std::vector<int>& encoders, int llm,
                                            const std::vector<StageAction>& llm_order);

}  // namespace loom
