#pragma once
/// Building blocks schedulers use to decide stages and orders: the stage partition the
/// problem asks for, the chain of stages it gives, how deep each stage sits in a stage
/// DAG, and the 1F1B order (written once: linear 1F1B and cross-modality 1F1B are the
/// same rule with different warm-up depths).
#include <vector>

#include "core/model.hpp"
#include "schedulers/lowering/programs.hpp"
#include "schedulers/planners/partition/partition.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

/// The stage partition the problem asks for (explicit or Eq 3.5 with its cost view).
std::vector<StageRange> plan_stages(const SchedulingProblem& problem);
/// The same into `stages` stages (parallel.pp x chunks for virtual stages); the explicit
/// schedule.stage_layers must then list `stages` entries.
std::vector<StageRange> plan_stages(const SchedulingProblem& problem, int stages);

/// Contiguous global-layer ranges as stages, cut into segments at module boundaries.
StageGraph chain_stages(const Model& model, const std::vector<StageRange>& ranges);

/// Global layers, in order (a module group's, whose modules may interleave with another
/// group's), as segments: runs of consecutive layers of one module.
std::vector<Segment> segments_of(const Model& model, const std::vector<int>& layers);

/// For each stage, the most stages on any path from it to a sink of the stage graph
/// (0 for the last LLM stage): stage s of a chain of p has p - s - 1.
std::vector<int> stages_downstream(const Model& model, const StageGraph& graph);

/// 1F1B on a stage graph: stage s warms up with min(warmup[s], m) forwards, then
/// alternates one forward and one backward, then drains. With warmup = p - s - 1 this is
/// the linear 1F1B (dissertation §4.2.1); with stages_downstream() it is the
/// cross-modality 1F1B of cornstarch-arxiv §4.1 Fig 6.
StageOrders one_f_one_b_orders(const std::vector<int>& warmup, int microbatches);

/// Throws InputError when the config has per-module layouts (parallel.modules): every
/// scheduler but the per-module ones (cornstarch, hetero-*) runs the single
/// parallel.pp/dp/tp layout.
void require_single_layout(const SchedulingProblem& problem, const char* scheduler_name);

}  // namespace loom
