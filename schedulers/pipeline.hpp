#pragma once
/// Lowering of a per-stage action order into a full Schedule. Schedulers for linear
/// pipelines (GPipe, 1F1B, and later zero-bubble and interleaved variants) only decide the
/// order of (pass, microbatch) on each stage; this pass does the rest, in one place:
///   1. place ranks: replica d, stage s -> rank d*pp + s on GPUs [rank*tp, rank*tp + tp)
///   2. assign samples to (replica, microbatch) in order
///   3. partition layers into stages (Eq 3.5 with the configured cost view, or explicit)
///   4. expand each action into one Compute per module segment of the stage, with costs
///      from the cost model (frozen status applied, Eq 3.2)
///   5. add Recv before and Send after each compute that crosses a stage boundary
///   6. add the data-parallel gradient all-reduce of each stage's trainable parameters
///   7. fill static memory (parameters, gradients, optimizer state)
#include <vector>

#include "core/schedule.hpp"
#include "schedulers/partition.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

struct StageAction {
  Pass pass = Pass::kF;
  int microbatch = 0;
};
/// orders[s]: the actions of stage s in execution order (the same in every replica).
using StageOrders = std::vector<std::vector<StageAction>>;

/// The stage partition the problem asks for (explicit or Eq 3.5 with its cost view).
std::vector<StageRange> plan_stages(const SchedulingProblem& problem);

Schedule lower_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                        const StageOrders& orders);

}  // namespace loom
