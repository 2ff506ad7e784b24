#pragma once
/// Planning helpers shared by the multimodal pipeline schedulers (encoders-replicated,
/// encoders-colocated, cornstarch): the model graph seen as encoder branches joining an
/// LLM, Eq 3.5 partitioning of one branch, and the planner's view of a candidate
/// allocation's iteration time (cornstarch-arxiv §5.2 Algorithm 1, get_iteration_time).
/// Lowering itself (messages along the module DAG, fan-in at the LLM) is
/// lower_stage_graph() in schedulers/lowering/lowering.hpp, shared with the linear schedulers.
#include <optional>
#include <string>
#include <vector>

#include "schedulers/lowering/lowering.hpp"

namespace loom {

/// Encoder branches (an encoder with the projectors that follow it; cornstarch-arxiv §4.1:
/// "sets of encoder + projector" have no dependency on each other) and the LLM part
/// (every other module: the sink and anything between the projectors and it).
struct Branches {
  std::vector<std::vector<int>> encoders;  ///< per branch, its global layers in order
  std::vector<int> llm;                    ///< the LLM part's global layers in order
  std::vector<std::string> names;          ///< per branch, the encoder module's name
};
/// Throws InputError when the model has no encoder branch or no LLM part.
Branches split_branches(const Model& model, const char* scheduler_name);

/// Per-layer costs T_l (F + B) under the problem's partition view for its first microbatch
/// (dissertation §3.3.1 Eq 3.2-3.3 for `true`; F + 2F for `naive`), index = global layer.
std::vector<double> view_costs(const SchedulingProblem& problem);

/// Eq 3.5 over the ordered `layers` (not necessarily contiguous in the global order) cut
/// into `stages` pieces; each piece as segments cut where the module changes. `head_s` is
/// work the first piece carries ahead of its layers (encoders colocated on the LLM's first
/// stage). Throws InputError naming `what` when there are fewer layers than stages.
std::vector<std::vector<Segment>> partition_branch(const Model& model,
                                                   const std::vector<int>& layers,
                                                   const std::vector<double>& costs, int stages,
                                                   const std::string& what, double head_s = 0);

/// Modality parallelism's stage graph (cornstarch-arxiv §4.1; DistTrain's disaggregated
/// encoder and LLM stages): encoder branch b cut into encoder_stages[b] stages of its own,
/// then the LLM part into llm_stages stages, each partitioned by Eq 3.5.
StageGraph disaggregated_graph(const Model& model, const Branches& branches,
                               const std::vector<double>& costs,
                               const std::vector<int>& encoder_stages, int llm_stages);

/// The fused encoders' stage count, an option of the schedulers that fuse them
/// (encoders-colocated; cornstarch and entrain declare it among their own): "auto" (the
/// scheduler's rule) or E; E = 0 puts the encoders on the LLM's first stage.
struct EncoderStagesOptions {
  std::optional<int> encoder_stages;
};
const OptionSet<EncoderStagesOptions>& encoder_stages_options();
/// The help text of an `encoder_stages` option: `stages` what E counts, `rule` what
/// "auto" picks.
std::string encoder_stages_help(const std::string& stages, const std::string& rule);

/// Encoders-colocated's stage graph (cornstarch-arxiv §2.2, Fig 1c): every encoder branch
/// cut into E pieces, stage k running piece k of each one after the other, then the LLM
/// part in pp - E stages; E = 0 runs every encoder on the LLM's first stage, ahead of its
/// first LLM piece (Megatron-Core's encoder_pipeline_model_parallel_size = 0). E is
/// `encoder_stages` (the scheduler's option of that name), or (nullopt) the E >= 1 whose
/// slowest stage over the whole chain is fastest. Throws InputError naming
/// `scheduler_name` when E leaves the LLM no stage.
StageGraph encoders_colocated_graph(const SchedulingProblem& problem, const Branches& branches,
                                    const std::vector<double>& costs, const char* scheduler_name,
                                    std::optional<int> encoder_stages);

/// The bottleneck (largest stage sum of T_l) of that partition: t_i of Algorithm 1.
double branch_bottleneck(const std::vector<int>& layers, const std::vector<double>& costs,
                         int stages, double head_s = 0);

/// What the planner believes one iteration of `graph` takes: the stage graph lowered with
/// cross-modality 1F1B and the costs of the problem's partition view, run through the
/// contention-free evaluator. Under `true` this is the real iteration time (minus link
/// contention); under `naive` it is a frozen-unaware system's estimate.
double predicted_iteration_s(const SchedulingProblem& problem, const StageGraph& graph);

/// The stage graph lowered with cross-modality 1F1B (stages_downstream warm-ups) and the
/// real frozen-aware costs.
Schedule lower_multimodal(const SchedulingProblem& problem, const char* scheduler_name,
                          const StageGraph& graph);

}  // namespace loom
